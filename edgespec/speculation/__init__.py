"""The speculation core: one round (``step``), the rounds as a stream of events
(``loop``), the plan of each round (``planning``: which drafter, how many tokens) and
the acceptance rules (``verify``). Free of UI and I/O; the drafters are in
``edgespec.drafting``, the adaptive policy in ``edgespec.policy``.
"""
