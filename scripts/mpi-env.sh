# Sourced by the scripts that launch MPI jobs (and by the tests): what Open MPI
# needs to run as root, oversubscribed on a small machine, inside a container.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Shared-memory messages up to 16 KiB go eagerly (the default is 4 KiB): an
# intake batch of 50 small transitions (~6.7 KB) and a learner's 512-priority
# update (~8 KB) then need no rendezvous handshake with the busy server rank.
# Measured 1.3-2.7x more small-transition intake (docs/performance.md).
export OMPI_MCA_btl_vader_eager_limit=${OMPI_MCA_btl_vader_eager_limit:-16384}
# mpirun, on Ctrl-C, SIGTERM, `timeout` or a rank's failure, sends every rank
# SIGCONT, waits this many seconds, sends SIGTERM, waits as long again, then
# SIGKILL (Open MPI's default: 1 s). The replay ranks write their final
# checkpoint between SIGTERM and SIGKILL: give it longer than the server's
# "checkpoint: ... is complete: ... in X s" line says one takes. The price:
# a job ended that way takes twice this to end (docs/checkpoints.md).
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-30}
# Idle OpenMP threads sleep instead of spinning, so oversubscribed ranks do not
# steal each other's cores.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
