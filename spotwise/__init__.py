"""spotwise: ML training and hyper-parameter tuning on spot capacity at the lowest honest cost."""

__version__ = "0.1.0"
