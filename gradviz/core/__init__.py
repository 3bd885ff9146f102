"""The engine: tracing, statistics, grouping, layout. Never imports Qt."""
