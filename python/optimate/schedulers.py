"""The seed's scheduler spelling: ``from optimate.schedulers import PriorityScheduler``.

``PriorityScheduler`` is the priority optimizer (``optimate.optimizers.PrioritySchedulerOptimizer``,
registry name ``priority``) under the name the seed's section 3.1.1 imports, with the same options.
Give it where the seed does, as the ``scheduler`` of a dict of engine arguments, or with the other
optimizers::

    engine = create_optimized_engine({"model": "models/m.gguf", "scheduler": PriorityScheduler()})
    engine = create_optimized_engine(EngineArgs(model="models/m.gguf"), optimizers=[PriorityScheduler(levels=3)])

A larger priority is more important (the seed's rule, the default ``priority_order``).
"""

from __future__ import annotations

from optimate.optimizers import PrioritySchedulerOptimizer


class PriorityScheduler(PrioritySchedulerOptimizer):
    """Strict priority levels, a starvation bound per level and priority preemption: the priority
    optimizer under the seed's name. Options as PrioritySchedulerOptimizer's."""


__all__ = ["PriorityScheduler"]
