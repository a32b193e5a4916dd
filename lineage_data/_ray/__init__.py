"""The only package that talks to Ray: lowering, the coordinator actor, the file datasource."""
