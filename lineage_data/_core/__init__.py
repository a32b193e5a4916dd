"""Ray-free lineage core: keys, outcomes, rules, per-run state and the batch operators."""
