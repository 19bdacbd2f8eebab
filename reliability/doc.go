// Package reliability holds gpuguard's reliability suite: tests that run the
// supervisor many times over, or under faults, and check the promises it
// makes to a user (docs/reliability.md):
//
//   - the job's output reaches the terminal byte for byte, last partial
//     lines included, under pipes and under a pseudo-terminal;
//   - every forwarded signal reaches the job exactly once, the exit status
//     is the job's own (128+N when signal N killed it), and no process of
//     the job outlives gpuguard, not even after kill -9 of gpuguard;
//   - a full or read-only run directory, a corrupt state.json, a policy
//     file edited mid-run, a checkpoint directory deleted mid-run and a
//     clock that jumps backwards neither stop the job nor swallow its exit
//     status, and gpuguard says what went wrong;
//   - no file a test gives gpuguard (configs, policies, checkpoints, the
//     example directory) is modified.
//
// The package has no code of its own: everything is in its tests. The test
// binary plays every program the tests need (see TestMain): gpuguard
// itself (supervisor.Run, as main.go calls it), its watchdog, the fake
// trainer of internal/supervisor/supervisortest, and the jobs of jobs_test.go.
//
//	go test ./reliability                      # a quarter of the counts (about 85 s on 2 busy cores)
//	go test -short ./reliability               # a fortieth (about 20 s)
//	RELIABILITY_SCALE=1 go test -timeout 20m ./reliability   # the full counts (about 7 minutes)
package reliability
