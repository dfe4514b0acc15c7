"""Price-performance: formulas (the published units), cost (a built cluster in $/h),
planner (`make plan`), bench_table (`make bench`'s rows, table and chart)."""
