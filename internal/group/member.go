package group

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Member is a gpuguard of rank > 0: it joins the leader, tells it of its
// failures and reports, and takes its stops, decisions and goes. When the
// connection breaks it rejoins; when it cannot within the timeout, the
// group is lost (Lost) and the member gives up.
type Member struct {
	spec Spec

	mu      sync.Mutex
	w       *wire
	leader  string // the address joined
	lastGo  *Go
	dec     map[int]Decision
	pending *Msg // the last report, sent again after a rejoin
	lostErr error
	closing bool
	changed chan struct{}

	stops    chan Notice
	lostC    chan struct{}
	lostOnce sync.Once
	quit     chan struct{}
}

// Join joins the group's leader, trying for at most the timeout (the
// leader may start later than its members). cancel ends the wait.
func Join(spec Spec, cancel <-chan struct{}) (*Member, error) {
	m := &Member{spec: spec, dec: map[int]Decision{}, changed: make(chan struct{}),
		stops: make(chan Notice, 4), lostC: make(chan struct{}), quit: make(chan struct{})}
	if err := m.connect(time.Now().Add(spec.Timeout), cancel); err != nil {
		return nil, err
	}
	go m.pinger()
	return m, nil
}

// Leader is the address of the leader joined.
func (m *Member) Leader() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader
}

// addrs is where the leader may be: its address, or those in its file.
func (m *Member) addrs() ([]string, error) {
	if m.spec.Addr != "" {
		return []string{m.spec.Addr}, nil
	}
	f, err := readLeaderFile(m.spec.Dir)
	if err != nil {
		return nil, err
	}
	if f.Group != m.spec.ID {
		return nil, fmt.Errorf("%s names group %q, not %q (an earlier run's?)", m.spec.Where(), f.Group, m.spec.ID)
	}
	return f.Addrs, nil
}

// connect dials and greets the leader until it answers, deadline passes
// or cancel is closed. A refusal ends it at once.
func (m *Member) connect(deadline time.Time, cancel <-chan struct{}) error {
	var last error
	for {
		addrs, err := m.addrs()
		if err != nil {
			last = err
		}
		for _, a := range addrs {
			w, welcome, err := m.hello(a)
			if err == nil {
				m.mu.Lock()
				m.w, m.leader = w, a
				if welcome.Go != nil {
					m.lastGo = welcome.Go
				}
				if welcome.Decision != nil {
					m.dec[welcome.Decision.Attempt] = *welcome.Decision
				}
				pending := m.pending
				m.changedLocked()
				m.mu.Unlock()
				if pending != nil {
					_ = w.send(*pending)
				}
				go m.read(w)
				return nil
			}
			var refused refusedError
			if errors.As(err, &refused) {
				return err
			}
			last = err
		}
		if time.Now().After(deadline) {
			if last == nil {
				last = errors.New("no address")
			}
			return lost("cannot reach the group's leader at %s within %s: %v", m.spec.Where(), m.spec.Timeout, last)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-cancel:
			return errCancelled
		case <-m.quit:
			return errCancelled
		}
	}
}

type refusedError struct{ msg string }

func (e refusedError) Error() string { return e.msg }

func (m *Member) hello(addr string) (*wire, Msg, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, Msg{}, err
	}
	w := newWire(c)
	if err := w.send(Msg{Type: TypeHello, Group: m.spec.ID, Rank: m.spec.Rank, Size: m.spec.Size, Host: m.spec.Host}); err != nil {
		w.close()
		return nil, Msg{}, err
	}
	ans, err := w.recv(m.spec.Timeout)
	if err != nil {
		w.close()
		return nil, Msg{}, err
	}
	switch ans.Type {
	case TypeWelcome:
		return w, ans, nil
	case TypeRefused:
		w.close()
		return nil, Msg{}, refusedError{fmt.Sprintf("the group's leader at %s refused rank %d: %s", addr, m.spec.Rank, ans.Error)}
	}
	w.close()
	return nil, Msg{}, fmt.Errorf("the leader at %s answered %q to hello", addr, ans.Type)
}

func (m *Member) read(w *wire) {
	for {
		msg, err := w.recv(m.spec.Timeout)
		if err != nil {
			m.broke(w, err)
			return
		}
		m.mu.Lock()
		switch msg.Type {
		case TypeStop:
			if msg.Notice != nil && m.lastGo != nil && msg.Attempt == m.lastGo.Attempt {
				select {
				case m.stops <- *msg.Notice:
				default:
				}
			}
		case TypeDecision:
			if d := msg.Decision; d != nil {
				m.dec[d.Attempt] = *d
				// A last decision on an attempt this member has not
				// reported: the leader ended its run; the job stops now.
				if d.Verb != "relaunch" && m.lastGo != nil && d.Attempt == m.lastGo.Attempt && (m.pending == nil || m.pending.Attempt < d.Attempt) {
					select {
					case m.stops <- Notice{Attempt: d.Attempt, Rank: 0, Host: msg.Host, Text: d.Reason, LeaderEnded: true}:
					default:
					}
				}
			}
		case TypeGo:
			if msg.Go != nil {
				m.lastGo = msg.Go
			}
		}
		m.changedLocked()
		m.mu.Unlock()
	}
}

// broke rejoins after the connection broke; the group is lost when that
// fails within the timeout.
func (m *Member) broke(w *wire, err error) {
	w.close()
	m.mu.Lock()
	if m.closing || m.w != w {
		m.mu.Unlock()
		return
	}
	m.w = nil
	m.mu.Unlock()
	if cerr := m.connect(time.Now().Add(m.spec.Timeout), nil); cerr != nil {
		if IsCancelled(cerr) {
			return
		}
		m.setLost(lost("lost the group's leader at %s (%v) and could not rejoin within %s", m.Leader(), err, m.spec.Timeout))
	}
}

func (m *Member) setLost(err error) {
	m.lostOnce.Do(func() {
		m.mu.Lock()
		m.lostErr = err
		m.changedLocked()
		m.mu.Unlock()
		close(m.lostC)
	})
}

func (m *Member) changedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Member) pinger() {
	t := time.NewTicker(pingEvery(m.spec.Timeout))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-m.quit:
			return
		}
		m.send(Msg{Type: TypePing})
	}
}

// send sends msg when connected; what is lost while not is resent or not
// needed (see pending).
func (m *Member) send(msg Msg) {
	m.mu.Lock()
	w := m.w
	m.mu.Unlock()
	if w != nil {
		msg.Rank, msg.Host = m.spec.Rank, m.spec.Host
		_ = w.send(msg)
	}
}

// OOM tells the leader the job printed an out-of-memory line.
func (m *Member) OOM(attempt int, n Notice) {
	m.send(Msg{Type: TypeOOM, Attempt: attempt, Notice: &n})
}

// Ended reports the attempt's end to the leader (again after a rejoin).
func (m *Member) Ended(rep Report) {
	msg := Msg{Type: TypeEnded, Attempt: rep.Attempt, Report: &rep, Rank: m.spec.Rank, Host: m.spec.Host}
	m.mu.Lock()
	m.pending = &msg
	m.mu.Unlock()
	m.send(msg)
}

// Stops gives the leader's stops for the running attempt.
func (m *Member) Stops() <-chan Notice { return m.stops }

// Lost is closed when the leader could not be reached within the timeout.
func (m *Member) Lost() <-chan struct{} { return m.lostC }

// Err is why the group was lost (nil while it is not).
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lostErr
}

func (m *Member) wait(cancel <-chan struct{}, cond func() bool) error {
	for {
		m.mu.Lock()
		if cond() {
			m.mu.Unlock()
			return nil
		}
		if m.lostErr != nil {
			err := m.lostErr
			m.mu.Unlock()
			return err
		}
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-ch:
		case <-cancel:
			return errCancelled
		}
	}
}

// AwaitDecision waits for the leader's decision on attempt n.
func (m *Member) AwaitDecision(n int, cancel <-chan struct{}) (Decision, error) {
	var d Decision
	err := m.wait(cancel, func() bool {
		var ok bool
		d, ok = m.dec[n]
		return ok
	})
	return d, err
}

// AwaitGo waits for the go of an attempt after attempt after (0: the
// first this member runs). When the leader ends its run instead (a last
// decision on a later attempt, sent before its go), it returns that
// decision and no go.
func (m *Member) AwaitGo(after int, cancel <-chan struct{}) (Go, *Decision, error) {
	var g Go
	var end *Decision
	err := m.wait(cancel, func() bool {
		if m.lastGo != nil && m.lastGo.Attempt > after {
			g = *m.lastGo
			return true
		}
		for n, d := range m.dec {
			if n > after && d.Verb != "relaunch" {
				end = &d
				return true
			}
		}
		return false
	})
	return g, end, err
}

// Close hangs up.
func (m *Member) Close() {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return
	}
	m.closing = true
	w := m.w
	m.mu.Unlock()
	close(m.quit)
	if w != nil {
		w.close()
	}
}
