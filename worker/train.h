/*
 * train: `cohort-worker train`, the data-parallel training loop: options
 * from the environment and the command line, the rendezvous, the shard of
 * each epoch, one fused gradient allreduce per step, evaluation, progress
 * lines and checkpoints.  Also `cohort-worker mkdata`.
 */
#ifndef COHORT_TRAIN_H
#define COHORT_TRAIN_H

/* Both return the process exit status. */
int train_main(int argc, char **argv);
int train_mkdata_main(int argc, char **argv);

#endif
