package group

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// maxLine bounds one message (a verdict with its OOM figures is a few KiB).
const maxLine = 1 << 20

// writeTimeout bounds one message's write: a peer that does not read is
// treated as gone.
const writeTimeout = 10 * time.Second

// wire is one connection: messages out under a lock and a deadline,
// messages in from a scanner.
type wire struct {
	c  net.Conn
	mu sync.Mutex
	sc *bufio.Scanner
}

func newWire(c net.Conn) *wire {
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	return &wire{c: c, sc: sc}
}

func (w *wire) send(m Msg) error {
	m.V = Version
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err = w.c.Write(append(b, '\n'))
	return err
}

// recv reads the next message, waiting at most timeout.
func (w *wire) recv(timeout time.Duration) (Msg, error) {
	_ = w.c.SetReadDeadline(time.Now().Add(timeout))
	if !w.sc.Scan() {
		err := w.sc.Err()
		if err == nil {
			err = errors.New("connection closed")
		}
		return Msg{}, err
	}
	var m Msg
	if err := json.Unmarshal(w.sc.Bytes(), &m); err != nil {
		return Msg{}, fmt.Errorf("not a gpuguard group message: %v", err)
	}
	if m.V != Version {
		return Msg{}, fmt.Errorf("peer speaks group protocol version %d, this gpuguard %d: run the same gpuguard on every node", m.V, Version)
	}
	return m, nil
}

func (w *wire) close() { _ = w.c.Close() }

// pingEvery is how often a quiet connection is pinged: four times within
// the timeout after which silence counts as gone.
func pingEvery(timeout time.Duration) time.Duration { return timeout / 4 }

// leaderFile is what the leader writes into the rendezvous directory.
type leaderFile struct {
	V     int      `json:"v"`
	Group string   `json:"group"`
	Host  string   `json:"host"`
	PID   int      `json:"pid"`
	Addrs []string `json:"addrs"` // HOST:PORT to try, in order
}

// writeLeaderFile writes the leader's addresses atomically into dir.
func writeLeaderFile(dir string, f leaderFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create the group's directory: %w", err)
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d", LeaderFile, os.Getpid()))
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("cannot write the group's leader file: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, LeaderFile)); err != nil {
		return fmt.Errorf("cannot write the group's leader file: %w", err)
	}
	return nil
}

func readLeaderFile(dir string) (leaderFile, error) {
	var f leaderFile
	b, err := os.ReadFile(filepath.Join(dir, LeaderFile))
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %v", filepath.Join(dir, LeaderFile), err)
	}
	return f, nil
}

// localAddrs lists this host's addresses with port, the non-loopback ones
// first: another node reaches the leader through one of them.
func localAddrs(host string, port int) []string {
	var out, lo []string
	ifs, _ := net.InterfaceAddrs()
	for _, a := range ifs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		hp := net.JoinHostPort(ipn.IP.String(), fmt.Sprint(port))
		if ipn.IP.IsLoopback() {
			lo = append(lo, hp)
		} else {
			out = append(out, hp)
		}
	}
	if host != "" {
		out = append(out, net.JoinHostPort(host, fmt.Sprint(port)))
	}
	return append(out, lo...)
}
