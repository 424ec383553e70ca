"""Prefect flows, deployments and the ``sluice`` CLI: the one package that imports Prefect."""

from flows.prefect_logs import hide_explained_tracebacks

hide_explained_tracebacks()
