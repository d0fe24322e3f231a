"""pvfs: a parallel file system in the line of PVFS."""
