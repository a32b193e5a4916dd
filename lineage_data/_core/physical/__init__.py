"""Physical planning: how the lineage plan runs on Ray Data, decided by named rules, Ray-free.

:func:`physical_plan` starts from one :class:`Step` per stage and applies each rule of :data:`RULES`
once, in order; each rule is one decision in a module of its own: :mod:`~.runner` (tasks or an actor
pool), :mod:`~.block_rows`, :mod:`~.fold` (a reduce in the actors before it), :mod:`~.batches` (who
cuts them), :mod:`~.terminal`, :mod:`~.one_piece`. ``lineage_data._ray.lower`` only translates the
result to Ray Data calls, and ``LineageDataset.explain()`` prints it:

    >>> from lineage_data._core.plan import Plan, Source
    >>> from lineage_data._core.stages import Expand, MapBatches, Reduce, UserFn
    >>> class Model:
    ...     def __call__(self, batch): return batch
    >>> plan = Plan(Source(), (
    ...     Expand(name="pages", call=UserFn(iter), level=0),
    ...     MapBatches(name="ocr", call=UserFn(Model), level=1, batch_size=32),
    ...     Reduce(name="docs", call=UserFn(None), level=1),
    ... ))
    >>> print(physical_plan(plan).explain())
    physical plan: the Ray Data steps after the source
      1. [0] expand 'pages': tasks; whole blocks; children in blocks of 32 rows
      2. [1] map 'ocr': actor pool; Ray Data cuts batches of 32; then [2] reduce 'docs' in its actors; reports the terminal rows
"""

from lineage_data._core.physical.optimizer import RULES, Rule, physical_plan
from lineage_data._core.physical.steps import Batches, PhysicalPlan, Runner, Step

__all__ = ["RULES", "Batches", "PhysicalPlan", "Rule", "Runner", "Step", "physical_plan"]
