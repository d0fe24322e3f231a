"""The collective-caching benchmark: the MPI program (``mpi``) and its driver (``drive``)."""
