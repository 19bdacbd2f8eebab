package supervisor

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/gpuguard/gpuguard/internal/attempt"

	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// forwardedSignals are the signals gpuguard passes on to the job.
var forwardedSignals = attempt.ForwardedSignals

// terminating reports whether sig asks the job to end: after one, gpuguard
// never starts the command again.
func terminating(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

// signalEvent says what gpuguard did with a signal it received.
type signalEvent struct {
	Signal syscall.Signal
	// Action is record.SignalForwarded (passed once to the job),
	// SignalKilled (a second SIGINT/SIGTERM: the job's tree was sent
	// SIGKILL) or SignalNoJob (none was running; for a terminating signal,
	// none will be started).
	Action string
	Pid    int // the attempt's main child, 0 when none
}

// Signals receives the signals gpuguard gets during a run, across attempts,
// and forwards them to the attempt attached at the moment: SIGINT, SIGTERM,
// SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded once each; a second
// SIGINT or SIGTERM (in any order) sends SIGKILL to the whole tree instead;
// SIGWINCH resizes the attempt's pty.
//
// In raw mode a ^C typed on the terminal is not a signal to gpuguard: it
// reaches the job through the pty's line discipline, exactly once. The
// attempt notices it in the input it copies, so Terminated reports it too.
type Signals struct {
	ch         chan os.Signal
	quitLoop   chan struct{}
	quitNotify chan struct{}
	loopDone   chan struct{}
	notifyDone chan struct{}
	stopOnce   sync.Once

	mu       sync.Mutex
	att      *Attempt
	last     *Attempt // most recent attempt attached, for typed interrupts
	armed    bool     // an attempt is starting: keep signals for it
	queued   []queuedSignal
	term     syscall.Signal
	termC    chan struct{} // closed at the first terminating signal
	intTerm  int
	onSignal func(signalEvent)
	events   chan signalEvent
}

type queuedSignal struct {
	sig      syscall.Signal
	escalate bool
}

// notifySignals starts receiving the forwarded signals and SIGWINCH. Call
// Stop when the run is over, to give them back their default behaviour.
func notifySignals() *Signals {
	s := &Signals{
		ch:         make(chan os.Signal, 64),
		quitLoop:   make(chan struct{}),
		quitNotify: make(chan struct{}),
		loopDone:   make(chan struct{}),
		notifyDone: make(chan struct{}),
		events:     make(chan signalEvent, 64),
		termC:      make(chan struct{}),
	}
	sigs := []os.Signal{syscall.SIGWINCH}
	for _, sig := range forwardedSignals {
		sigs = append(sigs, sig)
	}
	signal.Notify(s.ch, sigs...)
	go s.loop()
	go s.notify()
	return s
}

// OnSignal sets a function told about each forwarded signal (for status
// lines and events). It runs on its own goroutine, in order, so that a slow
// terminal never delays forwarding; events are dropped if it falls far
// behind.
func (s *Signals) OnSignal(f func(signalEvent)) {
	s.mu.Lock()
	s.onSignal = f
	s.mu.Unlock()
}

// Arm marks the start of an attempt: signals received from now until Attach
// are kept and forwarded to the attempt Attach names, so that none is lost
// while the child is being started. Call it before checking Terminated.
func (s *Signals) Arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.queued = true, nil
}

// Attach makes a the attempt that signals go to from now on, first
// forwarding what arrived since Arm; nil detaches (signals received then are
// recorded, not forwarded, and what Arm kept is dropped).
func (s *Signals) Attach(a *Attempt) {
	s.mu.Lock()
	s.att = a
	if a != nil {
		s.last = a
	}
	q := s.queued
	s.armed, s.queued = false, nil
	s.mu.Unlock()
	if a == nil {
		return
	}
	for _, qs := range q {
		s.act(a, qs.sig, qs.escalate)
	}
}

// Terminated reports the first terminating signal (SIGINT, SIGTERM, SIGHUP,
// SIGQUIT) gpuguard received, or that was typed into the job's terminal in
// raw mode. After one, the attempt loop must not start the command again.
func (s *Signals) Terminated() (syscall.Signal, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != 0 {
		return s.term, true
	}
	if s.last != nil {
		if sig := s.last.TypedInterrupt(); sig != 0 {
			return sig, true
		}
	}
	return 0, false
}

// TerminatedC is closed when gpuguard receives its first terminating signal,
// so that a wait between attempts (backoff, GPU memory release) can end at
// once. A ^C typed into the job's terminal in raw mode does not close it:
// it ends the running attempt, and Terminated reports it after.
func (s *Signals) TerminatedC() <-chan struct{} { return s.termC }

// Stop restores the default handling of the signals and ends forwarding,
// after OnSignal has been told about every signal handled.
func (s *Signals) Stop() {
	s.stopOnce.Do(func() {
		signal.Stop(s.ch)
		close(s.quitLoop)
		<-s.loopDone
		close(s.quitNotify)
		<-s.notifyDone
	})
}

func (s *Signals) loop() {
	defer close(s.loopDone)
	for {
		select {
		case <-s.quitLoop:
			return
		case sig := <-s.ch:
			s.handle(sig.(syscall.Signal))
		}
	}
}

func (s *Signals) handle(sig syscall.Signal) {
	s.mu.Lock()
	a := s.att
	if sig == syscall.SIGWINCH {
		s.mu.Unlock()
		if a != nil {
			a.Resize()
		}
		return
	}
	if terminating(sig) && s.term == 0 {
		s.term = sig
		close(s.termC)
	}
	escalate := false
	if sig == syscall.SIGINT || sig == syscall.SIGTERM {
		s.intTerm++
		escalate = s.intTerm >= 2
	}
	if a == nil && s.armed {
		s.queued = append(s.queued, queuedSignal{sig, escalate})
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.act(a, sig, escalate)
}

// act forwards sig to a (or kills a's tree), and queues the event.
func (s *Signals) act(a *Attempt, sig syscall.Signal, escalate bool) {
	ev := signalEvent{Signal: sig}
	switch {
	case a == nil:
		ev.Action = record.SignalNoJob
	case escalate:
		ev.Action, ev.Pid = record.SignalKilled, a.PID()
		a.Kill("second " + signalName(sig))
	default:
		ev.Action, ev.Pid = record.SignalForwarded, a.PID()
		a.Signal(sig)
	}
	select {
	case s.events <- ev:
	default:
	}
}

func (s *Signals) notify() {
	defer close(s.notifyDone)
	for {
		select {
		case <-s.quitNotify:
			// Deliver what is queued, then stop.
			for {
				select {
				case ev := <-s.events:
					s.deliver(ev)
				default:
					return
				}
			}
		case ev := <-s.events:
			s.deliver(ev)
		}
	}
}

func (s *Signals) deliver(ev signalEvent) {
	s.mu.Lock()
	f := s.onSignal
	s.mu.Unlock()
	if f != nil {
		f(ev)
	}
}

// signalName is "SIGINT" for SIGINT.
func signalName(sig syscall.Signal) string { return attempt.SignalName(sig) }
