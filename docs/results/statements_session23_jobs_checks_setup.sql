ALTER TABLE jobs DROP CONSTRAINT jobs_backoff_base_ms_check, DROP CONSTRAINT jobs_check,
  DROP CONSTRAINT jobs_dst_gap_check, DROP CONSTRAINT jobs_dst_overlap_check,
  DROP CONSTRAINT jobs_handler_xor_target, DROP CONSTRAINT jobs_id_form, DROP CONSTRAINT jobs_kind,
  DROP CONSTRAINT jobs_max_attempts, DROP CONSTRAINT jobs_misfire_grace_ms_check,
  DROP CONSTRAINT jobs_misfire_max_catchup_check, DROP CONSTRAINT jobs_misfire_policy_check,
  DROP CONSTRAINT jobs_overlap_policy_check, DROP CONSTRAINT jobs_priority,
  DROP CONSTRAINT jobs_schedule_xor_at, DROP CONSTRAINT jobs_shard_nonnegative,
  DROP CONSTRAINT jobs_status, DROP CONSTRAINT jobs_timeout_ms_check;
