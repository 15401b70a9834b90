"""Files Kestrel writes: atomically (temporary name, fsync, rename) and ``.npz`` byte for byte reproducibly."""
