package group

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// ErrLost is the error of a group that lost a peer (a member its leader,
// or the leader a member) for longer than its timeout: the run gives up.
var ErrLost = errors.New("group peer lost")

// lostError is a loss in words; errors.Is(err, ErrLost) holds.
type lostError struct{ msg string }

func (e lostError) Error() string        { return e.msg }
func (e lostError) Is(target error) bool { return target == ErrLost }

func lost(format string, a ...any) error { return lostError{fmt.Sprintf(format, a...)} }

// Leader is the group's rank 0: it listens, takes members in, hears their
// failures and reports, and sends them the stops, decisions and goes.
type Leader struct {
	spec Spec
	ln   net.Listener

	mu       sync.Mutex
	peers    map[int]*wire
	hosts    map[int]string
	gone     map[int]time.Time // members whose connection broke, since when
	round    *Round
	lastGo   *Go
	lastDec  *Decision
	changed  chan struct{} // closed at every change; then replaced
	lostErr  error
	closing  bool
	readers  sync.WaitGroup
	stops    chan Notice
	lostC    chan struct{}
	quit     chan struct{}
	lostOnce sync.Once
}

// Listen starts the leader: it listens on spec.Addr's port (all
// interfaces), or on a free port whose addresses it writes into spec.Dir.
func Listen(spec Spec) (*Leader, error) {
	addr := ":0"
	if spec.Addr != "" {
		_, port, _ := net.SplitHostPort(spec.Addr)
		addr = ":" + port
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("the group's leader cannot listen on %s: %v", addr, err)
	}
	l := &Leader{
		spec: spec, ln: ln, peers: map[int]*wire{}, hosts: map[int]string{}, gone: map[int]time.Time{},
		changed: make(chan struct{}), stops: make(chan Notice, 4), lostC: make(chan struct{}), quit: make(chan struct{}),
	}
	if spec.Dir != "" {
		port := ln.Addr().(*net.TCPAddr).Port
		f := leaderFile{Group: spec.ID, Host: spec.Host, PID: os.Getpid(), Addrs: localAddrs(spec.Host, port), V: Version}
		if err := writeLeaderFile(spec.Dir, f); err != nil {
			ln.Close()
			return nil, err
		}
	}
	go l.accept()
	go l.pinger()
	return l, nil
}

// Addr is where the leader listens.
func (l *Leader) Addr() string { return l.ln.Addr().String() }

func (l *Leader) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.serve(newWire(c))
	}
}

// serve takes one connection: a hello, then the member's messages until
// the connection breaks.
func (l *Leader) serve(w *wire) {
	hello, err := w.recv(l.spec.Timeout)
	if err != nil || hello.Type != TypeHello {
		w.close()
		return
	}
	refuse := func(format string, a ...any) {
		_ = w.send(Msg{Type: TypeRefused, Error: fmt.Sprintf(format, a...)})
		w.close()
	}
	switch {
	case hello.Group != l.spec.ID:
		refuse("this leader leads group %q, not %q", l.spec.ID, hello.Group)
		return
	case hello.Size != l.spec.Size:
		refuse("the group has %d members (from the leader's %s), not %d", l.spec.Size, l.spec.From, hello.Size)
		return
	case hello.Rank <= 0 || hello.Rank >= l.spec.Size:
		refuse("rank %d is not a member's rank in a group of %d (1 to %d; 0 leads)", hello.Rank, l.spec.Size, l.spec.Size-1)
		return
	}
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		w.close()
		return
	}
	if old := l.peers[hello.Rank]; old != nil {
		if _, broke := l.gone[hello.Rank]; !broke {
			l.mu.Unlock()
			refuse("rank %d has joined already, from %s", hello.Rank, l.hosts[hello.Rank])
			return
		}
	}
	l.peers[hello.Rank], l.hosts[hello.Rank] = w, hello.Host
	delete(l.gone, hello.Rank)
	welcome := Msg{Type: TypeWelcome, Rank: 0, Host: l.spec.Host, Go: l.lastGo, Decision: l.lastDec}
	l.readers.Add(1)
	l.changedLocked()
	l.mu.Unlock()
	defer l.readers.Done()
	if err := w.send(welcome); err != nil {
		l.broke(hello.Rank, w, err)
		return
	}
	for {
		m, err := w.recv(l.spec.Timeout)
		if err != nil {
			l.broke(hello.Rank, w, err)
			return
		}
		l.handle(hello.Rank, m)
	}
}

func (l *Leader) handle(rank int, m Msg) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.round == nil || m.Attempt != l.round.Attempt {
		return
	}
	switch {
	case m.Type == TypeOOM && m.Notice != nil:
		l.stopLocked(l.round.Notice(rank), *m.Notice)
	case m.Type == TypeEnded && m.Report != nil:
		rep := *m.Report
		rep.Rank = rank
		stop, _ := l.round.Ended(rep)
		l.stopLocked(stop, Notice{Rank: rank, Host: rep.Host, Kind: rep.Verdict.Kind, At: rep.FailedAt, Text: rep.Verdict.Text})
		l.changedLocked()
	}
}

// stopLocked tells the members ranks to stop the attempt, for n. The
// leader's own attempt (rank 0) gets it on Stops.
func (l *Leader) stopLocked(ranks []int, n Notice) {
	n.Attempt = l.round.Attempt
	for _, r := range ranks {
		if r == 0 {
			select {
			case l.stops <- n:
			default:
			}
			continue
		}
		if w := l.peers[r]; w != nil {
			go func() { _ = w.send(Msg{Type: TypeStop, Attempt: l.round.Attempt, Notice: &n}) }()
		}
	}
}

// broke notes a member's connection gone; unless it rejoins within the
// timeout, the group is lost.
func (l *Leader) broke(rank int, w *wire, err error) {
	w.close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.peers[rank] != w || l.closing {
		return
	}
	since := time.Now()
	l.gone[rank] = since
	host := l.hosts[rank]
	go func() {
		select {
		case <-time.After(l.spec.Timeout):
		case <-l.quit:
			return
		}
		l.mu.Lock()
		at, still := l.gone[rank]
		l.mu.Unlock()
		if still && at.Equal(since) {
			l.setLost(lost("member rank %d (%s) has not answered for %s (%v)", rank, host, l.spec.Timeout, err))
		}
	}()
}

func (l *Leader) setLost(err error) {
	l.lostOnce.Do(func() {
		l.mu.Lock()
		l.lostErr = err
		l.changedLocked()
		l.mu.Unlock()
		close(l.lostC)
	})
}

func (l *Leader) changedLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *Leader) pinger() {
	t := time.NewTicker(pingEvery(l.spec.Timeout))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-l.quit:
			return
		}
		l.mu.Lock()
		ws := make([]*wire, 0, len(l.peers))
		for _, w := range l.peers {
			ws = append(ws, w)
		}
		l.mu.Unlock()
		for _, w := range ws {
			go func() { _ = w.send(Msg{Type: TypePing}) }()
		}
	}
}

// wait calls cond under the lock until it returns true, the group is
// lost, or cancel is closed.
func (l *Leader) wait(cancel <-chan struct{}, cond func() bool) error {
	for {
		l.mu.Lock()
		if l.lostErr != nil {
			err := l.lostErr
			l.mu.Unlock()
			return err
		}
		if cond() {
			l.mu.Unlock()
			return nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-cancel:
			return errCancelled
		}
	}
}

var errCancelled = errors.New("cancelled")

// IsCancelled reports whether err is a wait ended by its cancel channel.
func IsCancelled(err error) bool { return errors.Is(err, errCancelled) }

// WaitJoined waits until every member has joined, at most the timeout.
func (l *Leader) WaitJoined(cancel <-chan struct{}) error {
	timer := time.NewTimer(l.spec.Timeout)
	defer timer.Stop()
	c := make(chan struct{})
	go func() {
		select {
		case <-timer.C:
			close(c)
		case <-cancel:
			close(c)
		}
	}()
	err := l.wait(c, func() bool { return len(l.peers) >= l.spec.Size-1 })
	if IsCancelled(err) {
		select {
		case <-cancel:
			return err
		default:
		}
		l.mu.Lock()
		var missing []string
		for r := 1; r < l.spec.Size; r++ {
			if l.peers[r] == nil {
				missing = append(missing, strconv.Itoa(r))
			}
		}
		l.mu.Unlock()
		return lost("rank(s) %v of %d did not join the group at %s within %s", missing, l.spec.Size, l.spec.Where(), l.spec.Timeout)
	}
	return err
}

// Members is the members' hosts by rank, the leader's included.
func (l *Leader) Members() map[int]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]string{0: l.spec.Host}
	for r, h := range l.hosts {
		out[r] = h
	}
	return out
}

// Begin starts attempt g.Attempt across the group: a new round, and the
// go to every member.
func (l *Leader) Begin(g Go) {
	l.mu.Lock()
	l.round = NewRound(g.Attempt, l.spec.Size)
	l.lastGo = &g
	ws := l.peersLocked()
	l.mu.Unlock()
	for _, w := range ws {
		_ = w.send(Msg{Type: TypeGo, Attempt: g.Attempt, Go: &g})
	}
}

func (l *Leader) peersLocked() []*wire {
	ws := make([]*wire, 0, len(l.peers))
	for r, w := range l.peers {
		if _, broke := l.gone[r]; !broke {
			ws = append(ws, w)
		}
	}
	return ws
}

// OOM is the leader's own job's out-of-memory line: every other member is
// told to stop.
func (l *Leader) OOM(n Notice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.round != nil {
		l.stopLocked(l.round.Notice(0), n)
	}
}

// Stops gives the stops meant for the leader's own attempt.
func (l *Leader) Stops() <-chan Notice { return l.stops }

// Lost is closed when a member has been gone longer than the timeout.
func (l *Leader) Lost() <-chan struct{} { return l.lostC }

// Err is why the group was lost (nil while it is not).
func (l *Leader) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// Collect adds the leader's own report and waits for every member's; a
// failed attempt's peers are told to stop. It returns the reports by rank.
func (l *Leader) Collect(own Report, cancel <-chan struct{}) ([]Report, error) {
	l.mu.Lock()
	stop, _ := l.round.Ended(own)
	l.stopLocked(stop, Notice{Rank: 0, Host: own.Host, Kind: own.Verdict.Kind, At: own.FailedAt, Text: own.Verdict.Text})
	r := l.round
	l.mu.Unlock()
	err := l.wait(cancel, func() bool { return len(r.reports) >= r.Size })
	l.mu.Lock()
	defer l.mu.Unlock()
	return r.Reports(), err
}

// Decide sends every member the decision on the round's attempt.
func (l *Leader) Decide(d Decision) {
	l.mu.Lock()
	l.lastDec = &d
	ws := l.peersLocked()
	l.mu.Unlock()
	for _, w := range ws {
		_ = w.send(Msg{Type: TypeDecision, Attempt: d.Attempt, Decision: &d, Host: l.spec.Host})
	}
}

// Close ends the leader. Members that got a final decision hang up: they
// get up to the timeout to read it first.
func (l *Leader) Close() {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return
	}
	l.closing = true
	l.mu.Unlock()
	close(l.quit)
	l.ln.Close()
	done := make(chan struct{})
	go func() { l.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(l.spec.Timeout):
	}
	l.mu.Lock()
	for _, w := range l.peers {
		w.close()
	}
	l.mu.Unlock()
	if l.spec.Dir != "" {
		// the file names this leader only while it runs
		if f, err := readLeaderFile(l.spec.Dir); err == nil && f.PID == os.Getpid() {
			_ = os.Remove(l.spec.Dir + "/" + LeaderFile)
		}
	}
}
