package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/policy"
)

// Remembering what fit (policy key memo: true). A run that ends well after
// its relaunches changed knobs (a smaller batch, a validation crop, the
// allocator) writes the values it ended with to .gpuguard/memo.json in the
// working directory, keyed by the command and the policy. The next run of
// the same command under the same policy starts with them, rather than
// failing its way there again, and says so. An entry is used only when the
// command still gives the knobs the values the entry was learned from: a
// changed command starts from its own values.

// memoFile is the memo's path under the working directory.
const memoFile = ".gpuguard/memo.json"

type memoEntry struct {
	Command []string      `json:"command"`
	Policy  string        `json:"policy"`
	From    policy.Values `json:"from"` // the command's own values of the knobs changed
	To      policy.Values `json:"to"`   // what the run ended with
	Run     string        `json:"run"`
	At      time.Time     `json:"at"`
}

type memo struct {
	Version int                  `json:"version"`
	Entries map[string]memoEntry `json:"entries"`
}

func memoKey(pol string, argv []string) string {
	h := sha256.Sum256([]byte(pol + "\x00" + strings.Join(argv, "\x00")))
	return hex.EncodeToString(h[:8])
}

func readMemo(wd string) memo {
	m := memo{Version: 1, Entries: map[string]memoEntry{}}
	data, err := os.ReadFile(filepath.Join(wd, memoFile))
	if err != nil {
		return m
	}
	if json.Unmarshal(data, &m) != nil || m.Version != 1 || m.Entries == nil {
		return memo{Version: 1, Entries: map[string]memoEntry{}}
	}
	return m
}

// applyMemo starts a new run with the values the memo holds for its
// command, when the policy asks for it.
func (l *loop) applyMemo(status *Status) {
	if l.pol == nil || !l.pol.Memo() || l.cfg.ResumeRun != "" {
		return
	}
	l.memoFrom = maps.Clone(l.state.Policies.Values)
	e, ok := readMemo(l.wd).Entries[memoKey(l.pol.File(), l.cfg.Argv)]
	if !ok {
		return
	}
	vals := l.state.Policies.Values
	for k, v := range e.From {
		if cur, has := vals[k]; !has && !v.Null || has && cur != v {
			status.Printf("memo: not used: the command's %s is %s, the memo's values were learned from %s", k, cur.String(), v.String())
			return
		}
	}
	for k, v := range e.To {
		vals[k] = v
	}
	status.Printf("memo: starting with %s, what run %s ended with on %s (the command gives %s); set memo: false to start from the command's own values",
		describeValues(e.To), displayPath(e.Run, l.wd), e.At.Format(time.DateTime), describeValues(e.From))
}

// saveMemo records the values a successful run ended with, when they differ
// from the command's own.
func (l *loop) saveMemo() {
	if l.pol == nil || !l.pol.Memo() || l.memoFrom == nil {
		return
	}
	from, to := policy.Values{}, policy.Values{}
	for k, v := range l.state.Policies.Values {
		if old, had := l.memoFrom[k]; !had || old != v {
			to[k] = v
			from[k] = old
		}
	}
	m := readMemo(l.wd)
	key := memoKey(l.pol.File(), l.cfg.Argv)
	if len(to) == 0 {
		if _, ok := m.Entries[key]; !ok {
			return
		}
		delete(m.Entries, key)
	} else {
		m.Entries[key] = memoEntry{Command: l.cfg.Argv, Policy: l.pol.File(), From: from, To: to, Run: l.job.RunDir.Path(), At: time.Now().UTC()}
	}
	if err := writeMemo(l.wd, m); err != nil {
		l.job.Status.Printf("warning: cannot remember the values that fit: %v", err)
		return
	}
	if len(to) > 0 {
		l.job.Status.Printf("memo: remembered %s in %s for the next run of this command", describeValues(to), memoFile)
	}
}

func writeMemo(wd string, m memo) error {
	path := filepath.Join(wd, memoFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".memo-*.json")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(append(data, '\n'))
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
	}
	return werr
}
