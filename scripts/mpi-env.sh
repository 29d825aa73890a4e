# Sourced by the scripts that launch MPI jobs (and by the tests): what Open MPI
# needs to run as root, oversubscribed on a small machine, inside a container.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Idle OpenMP threads sleep instead of spinning, so oversubscribed ranks do not
# steal each other's cores.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
