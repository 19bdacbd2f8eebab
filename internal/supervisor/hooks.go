package supervisor

// Hooks: every concern beside the run loop plugs into it the same way, as
// nomad's task runner hooks do. A concern is one type in its own file that
// implements the stages it needs (the small interfaces below); register
// builds it from the run's configuration and adds it, or leaves it out when
// it is off, so that the loop (loop.go, observe.go) knows none of them by
// name and a concern that is off costs nothing. The runner type-asserts
// each hook once, into one slice per stage; stages run in registration
// order. See docs/hooks.md, "How to add a hook".

import (
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpuguard/gpuguard/internal/group"
	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// process is what the loop and its hooks ask of a running attempt's
// processes (the process side: attempt.go).
type process interface {
	procfs.ProcessList
	Done() <-chan struct{}
	Signal(sig syscall.Signal)
	Stop(reason string)
}

// attemptRun is one attempt as its hooks see it while it runs. The scanner
// goroutine calls line and event; the other stages run on the loop's.
type attemptRun struct {
	n       int
	plan    launchPlan
	row     *attemptRow
	grace   time.Duration   // oom_grace
	sampler *memory.Sampler // the memory sampler (observe.go)
	// probePhase: the torch probe reports phases, and they drive the
	// sampler in place of the output's.
	probePhase atomic.Bool
	// exit is how the attempt ended, as the classifier is told (stopped
	// stage: hooks add to it); end is its attempt_end event.
	exit    classify.Exit
	end     *record.AttemptEnd
	verdict classify.Verdict // the classifier's (judged stage: hooks amend it)
	// stream names the stream of the line being scanned, epoch the last
	// epoch a step named (-1: none); scanner goroutine only.
	stream string
	epoch  int64
}

// attemptStart is where the next attempt starts: its number and the
// checkpoint it resumes from (given: a hook chose it).
type attemptStart struct {
	n     int
	ckpt  string
	given bool
}

// outcome is an ended attempt as the loop decides on it. A group's leader
// replaces the failure with the group's first (from).
type outcome struct {
	n          int
	row        attemptRow
	v          classify.Verdict
	res        attemptResult
	exit       classify.Exit
	startStep  *int64
	terminated bool
	sig        syscall.Signal // the terminating signal gpuguard got, if any
	// What the policy is asked about: the attempt's own (its row's), or the
	// group's first failure's.
	peaks, starts map[classify.Phase]float64
	rejections    []string
	block         *policy.OOMBlock
	prefix        string // names the group member that failed first
	// groupFailed: a member of the group failed; from is the first
	// failure, reports every member's (group.go).
	groupFailed bool
	from        *group.Report
	reports     []group.Report
}

// The per-attempt stages, in the order they run.
type (
	// attemptStartingHook: before the attempt's processes start.
	attemptStartingHook interface{ attemptStarting(a *attemptRun) }
	// lineHook: each output line (scanner goroutine).
	lineHook interface {
		line(a *attemptRun, ln lines.Line)
	}
	// eventHook: each classifier event (scanner goroutine).
	eventHook interface {
		event(a *attemptRun, ev classify.Event)
	}
	// startedHook: the attempt's processes run.
	startedHook interface {
		started(a *attemptRun, p process)
	}
	// startFailedHook: the attempt could not be started (no other stage
	// follows for it).
	startFailedHook interface{ startFailed(a *attemptRun) }
	// stoppedHook: the processes are gone and the output scanned; the
	// verdict is not made yet (hooks add to a.exit and a.end).
	stoppedHook interface{ stopped(a *attemptRun) }
	// judgedHook: the verdict is made (hooks may amend it, and fill a.row).
	judgedHook interface{ judged(a *attemptRun) }
)

// action is what a run-level stage says of the run's course.
type action int

const (
	goOn     action = iota // the loop carries on
	relaunch               // the next attempt starts now
	endRun                 // the run ends with the stage's exit status
)

// The run-level stages, in the order they run.
type (
	// beforeAttemptHook: before an attempt is planned; a hook may choose
	// where it starts, or end the run.
	beforeAttemptHook interface {
		beforeAttempt(s *attemptStart) (code int, act action)
	}
	// launchingHook: the attempt is planned and about to run.
	launchingHook interface {
		launching(n int, p launchPlan)
	}
	// notStartedHook: the attempt could not be started; the run ends.
	notStartedHook interface {
		notStarted(o *outcome)
	}
	// settleHook: the attempt ended; a hook may relaunch or end the run
	// before the policy is asked, or change what it is asked about.
	settleHook interface {
		settle(o *outcome) (code int, act action)
	}
	// failedHook: the attempt (or the group) failed; before the policy.
	failedHook interface {
		failed(o *outcome) (code int, act action)
	}
	// decisionHook: adds to what the policy is asked (asking), and may act
	// on its decision in place of a relaunch (revise: the decision to
	// carry on with, or the run's end).
	decisionHook interface {
		asking(out *policy.Outcome)
		revise(o *outcome, out *policy.Outcome, d policy.Decision) (policy.Decision, int, action)
	}
	// decidedHook: the decision on attempt n is final (line: in words).
	decidedHook interface {
		decided(o *outcome, d policy.Decision, line string)
	}
	// stopperHook: a reason to stop relaunching that is not a terminating
	// signal (stopC is closed at it).
	stopperHook interface {
		stopC() <-chan struct{}
		stopSignal() (syscall.Signal, bool)
	}
	// finishHook: the run ends with code (raw: before --exit-codes),
	// before the summary table.
	finishHook interface{ finish(raw, code int) }
	// exitHook: the last thing the run does, state.json written.
	exitHook interface{ exiting(code int) }
	// closeHook: gpuguard is done with the run (deferred).
	closeHook interface{ close() }
)

// hooks are the run's registered hooks, one slice per stage.
type hooks struct {
	attemptStarting []attemptStartingHook
	line            []lineHook
	event           []eventHook
	started         []startedHook
	startFailed     []startFailedHook
	stopped         []stoppedHook
	judged          []judgedHook

	beforeAttempt []beforeAttemptHook
	launching     []launchingHook
	notStarted    []notStartedHook
	settle        []settleHook
	failed        []failedHook
	decision      []decisionHook
	decided       []decidedHook
	stopper       []stopperHook
	finish        []finishHook
	exiting       []exitHook
	close         []closeHook
}

// add registers h in every stage it implements.
func (hs *hooks) add(h any) {
	addTo(&hs.attemptStarting, h)
	addTo(&hs.line, h)
	addTo(&hs.event, h)
	addTo(&hs.started, h)
	addTo(&hs.startFailed, h)
	addTo(&hs.stopped, h)
	addTo(&hs.judged, h)
	addTo(&hs.beforeAttempt, h)
	addTo(&hs.launching, h)
	addTo(&hs.notStarted, h)
	addTo(&hs.settle, h)
	addTo(&hs.failed, h)
	addTo(&hs.decision, h)
	addTo(&hs.decided, h)
	addTo(&hs.stopper, h)
	addTo(&hs.finish, h)
	addTo(&hs.exiting, h)
	addTo(&hs.close, h)
}

func addTo[T any](s *[]T, h any) {
	if t, ok := h.(T); ok {
		*s = append(*s, t)
	}
}

// steer runs a run-level stage's hooks in order until one does not go on.
func steer[T any](hs []T, call func(T) (int, action)) (int, action) {
	for _, h := range hs {
		if code, act := call(h); act != goOn {
			return code, act
		}
	}
	return 0, goOn
}

// closeAll ends the hooks' work, the last registered first.
func (hs *hooks) closeAll() {
	for i := len(hs.close) - 1; i >= 0; i-- {
		hs.close[i].close()
	}
}

// stopperSignal is the first stopper hook's reason to stop relaunching, if any.
func (l *loop) stopperSignal() (syscall.Signal, bool) {
	for _, h := range l.hooks.stopper {
		if sig, ok := h.stopSignal(); ok {
			return sig, true
		}
	}
	return 0, false
}
