"""Job logic shipped with the kit. Point DEDUP_JOB (or a job's jobLogic) at your own."""
