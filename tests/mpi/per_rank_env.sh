#!/bin/sh
# per_rank_env.sh VAR=v0,v1,... -- program [args...]: runs the program with VAR set to this
# rank's value (the launcher's rank: Open MPI's OMPI_COMM_WORLD_RANK, Hydra's PMI_RANK, PMIx's
# PMIX_RANK; ranks past the list get its last value). For tests whose ranks must differ in a
# setting that may differ per rank (a SKIPRING_* variable that is not agreed).
spec=$1
shift
[ "$1" = "--" ] && shift
var=${spec%%=*}
vals=${spec#*=}
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
i=0
val=
old_ifs=$IFS
IFS=,
for v in $vals; do
  val=$v
  [ "$i" -eq "$rank" ] && break
  i=$((i + 1))
done
IFS=$old_ifs
export "$var=$val"
exec "$@"
