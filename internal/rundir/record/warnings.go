package record

// Warning kinds that are not the memory sampler's: the checkpoint probe's
// findings, journalled as warning events so that explain and report show
// them beside the memory warnings. The values are a contract (events.jsonl,
// docs/checkpoints.md).
const (
	// WarnCheckpointLoadFailed: the job failed to load the checkpoint it was
	// resumed from; the next attempt falls back to an older one.
	WarnCheckpointLoadFailed WarningKind = "checkpoint_load_failed"
	// WarnCheckpointPassedOver: a checkpoint newer than the one resumed from
	// was passed over (written incompletely, or one that failed to load).
	WarnCheckpointPassedOver WarningKind = "checkpoint_passed_over"
)
