"""Calls to providers: provider adapters, gateways (Ray actors), rate limits, retries, the batch tier."""
