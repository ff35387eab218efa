"""Everything tempomem keeps on disk. No Temporal imports here (ARCHITECTURE.md, layout)."""
