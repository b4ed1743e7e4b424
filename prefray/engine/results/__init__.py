"""Results: shards, the request store, aggregation, reports, figures, intervals, judge agreement, the manifest."""
