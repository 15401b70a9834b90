"""What a running launch keeps on disk: checkpoints and the buffer journal."""
