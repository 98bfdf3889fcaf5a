"""tpx profiler: top ops, CPU fallbacks, host syncs, H2D copies, graph breaks; with suggestions."""
