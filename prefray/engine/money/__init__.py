"""Money: the run budget, the response cache, estimates, the ledger of paid tries."""
