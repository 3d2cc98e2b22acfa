"""Exports: what traceforge writes for other tools to use.

Post-training datasets (`traceforge export sft|parallel|preference|rl`): `source` reads conversations
from the store, `selection` chooses and splits them, `redact` removes secrets and personal data,
`sft` / `parallel` / `preference` build the rows, `folder` writes parquet shards and the dataset
card, `pipeline` runs those steps in order, `hub` publishes a folder to the Hugging Face Hub.
"""
