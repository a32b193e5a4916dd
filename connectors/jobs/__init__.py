"""The installed jobs: ``lineage-data pdf IN OUT`` and ``lineage-data video IN OUT``.

Each job module has ``build(...)`` (the lineage plan: nothing runs until it is consumed),
``add_arguments(parser)`` (its options) and ``run(args)`` (the command: Ray quiet, the plan written as
shards, one summary). ``examples/`` shows how to write a pipeline of your own.
"""
