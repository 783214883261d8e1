"""Every dollar of a run: the ledger, spend forecasts, budget alerts and their delivery."""
