"""Built-in policies; importing this package registers each by name.

``on-demand`` and ``spot-greedy`` (references), ``asha`` (successive halving), ``spottune``
(SpotTune, ICDCS'20), ``spotwise`` (ours), and the deadline policies of Can't Be Late
(NSDI'24): ``greedy`` and ``uniform-progress``.
"""

from spotwise.planner.policies import asha, deadline, greedy, ours, spottune  # noqa: F401
