"""Physical planning: how the lineage plan runs on Ray Data, decided by named rules, Ray-free.

The lineage plan (:class:`~lineage_data._core.plan.Plan`) says what runs. :func:`physical_plan`
starts from one :class:`Step` per stage, with the defaults, and applies each rule of :data:`RULES`
once, in order; each rule is one decision in a module of its own, with the facts it reads and why:

- :mod:`~.runner`: Ray tasks or an actor pool, and batches in flight per actor;
- :mod:`~.block_rows`: rows per block of an expansion's children;
- :mod:`~.fold`: a reduce runs in the actors of the 1:1 stage before it;
- :mod:`~.batches`: who cuts ``batch_size`` batches, Ray Data or the operator (whole blocks);
- :mod:`~.terminal`: the last stage's step reports the terminal rows;
- :mod:`~.one_piece`: the last task step's blocks leave with each column in one chunk.

The lowering (``lineage_data._ray.lower``) only translates the result to Ray Data calls, and
``LineageDataset.explain()`` prints it. A new decision is a new rule module, added to
:data:`RULES` where the facts it reads are set, with a field on :class:`Step` if the lowering
needs it, and a test of its facts in and its decision out (tests/unit/test_physical_rules.py).

Example:
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
