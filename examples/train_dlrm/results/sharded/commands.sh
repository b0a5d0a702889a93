M="mpirun -np 2 --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1"
run() { name=$1; shift; s=$(date +%s); "$@" --quiet --json /tmp/dlrm_cmp/$name.json > /tmp/dlrm_cmp/$name.out 2> /tmp/dlrm_cmp/$name.err; echo "$name rc=$? $(( $(date +%s) - s ))s" >> /tmp/dlrm_cmp/log; }
run one_default $E
run np2_table_default $M $E --shard table
run one_fp32 $E --storage fp32
run np2_table_fp32 $M $E --storage fp32 --shard table
run np2_row_fp32 $M $E --storage fp32 --shard row
run np2_table_fp32_fp16wire $M $E --storage fp32 --shard table --comm-precision fp16
run np2_table_fp32_bf16wire $M $E --storage fp32 --shard table --comm-precision bf16
