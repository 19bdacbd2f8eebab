package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gpuguard/gpuguard/internal/fsutil"
	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/redact"
)

// Remembering what fit (policy key memo: true, or --memo). A run that ends
// well after its relaunches changed knobs (a smaller batch, a validation
// crop, the allocator) keeps the values it ended with in the user's cache
// directory ($XDG_CACHE_HOME/gpuguard/memo.json, else
// ~/.cache/gpuguard/memo.json: os.UserCacheDir), never in the project. An
// entry's key is the policy (its file and its text), the command without
// its resume arguments, and the device the values fitted on (the GPUs'
// model and memory, or the host's memory ceiling): the next run of the same
// command under the same policy on the same kind of device starts with
// them, rather than failing its way there again, and says so. An entry is
// used only when the command still gives the knobs the values the entry was
// learned from: a changed command starts from its own values.
//
// Several runs may end at once (a sweep on one machine): each reads the
// file, merges its entry under an exclusive lock on memo.json.lock, and
// replaces the file by renaming a complete temporary one, so a reader never
// sees half a file and no run's entry is lost. A memo that cannot be read
// (corrupt, unreadable, no cache directory) is a warning, never a failed
// run.

// memoVersion is the memo file's format; a file of another version is
// ignored (with a warning) and replaced at the next save.
const memoVersion = 2

type memoEntry struct {
	Command []string      `json:"command"` // without its resume arguments
	Policy  string        `json:"policy"`
	Device  string        `json:"device"`
	From    policy.Values `json:"from"` // the command's own values of the knobs changed
	To      policy.Values `json:"to"`   // what the run ended with
	Run     string        `json:"run"`
	At      time.Time     `json:"at"`
}

type memo struct {
	Version int                  `json:"version"`
	Entries map[string]memoEntry `json:"entries"`
}

// memoPath is the memo file: memo.json in gpuguard's directory under the
// user's cache directory.
func memoPath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the memo (%v); set XDG_CACHE_HOME", err)
	}
	return filepath.Join(dir, "gpuguard", "memo.json"), nil
}

// memoKey is an entry's key: a hash of the policy's identity, the command
// (resume arguments removed) and the device.
func memoKey(pol string, argv []string, device string) string {
	h := sha256.New()
	for _, s := range append([]string{pol, device}, argv...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// policyIdentity is the policy as the memo keys it: its file and a hash of
// its text (an edited policy may define its knobs differently), or a
// preset's name.
func policyIdentity(p *policy.Policy) string {
	id := p.File()
	if data, err := os.ReadFile(p.File()); err == nil {
		if abs, err := filepath.Abs(p.File()); err == nil {
			id = abs
		}
		sum := sha256.Sum256(data)
		id += "@" + hex.EncodeToString(sum[:8])
	}
	return id
}

// memoDevice describes what the values fitted on: the GPUs the job is given
// (model and memory, in order), or without GPUs the host's memory ceiling
// (the cgroup's limit below RAM, else RAM) and gpuguard's own address-space
// and data-size limits, which the job inherits.
func memoDevice(devs []gpu.Device) string {
	if len(devs) > 0 {
		parts := make([]string, len(devs))
		for i, d := range devs {
			name := d.Name
			if name == "" {
				name = "GPU"
			}
			parts[i] = fmt.Sprintf("%s %s", name, humanize.Bytes(d.TotalBytes))
		}
		return strings.Join(parts, ", ")
	}
	desc := "host"
	if h, err := procfs.ReadHost("/proc", os.Getpid()); err == nil {
		if h.Cgroup != nil && h.LimitBytes() != h.MemTotalBytes {
			desc += " cgroup " + humanize.Bytes(h.LimitBytes())
		} else {
			desc += " RAM " + humanize.Bytes(h.MemTotalBytes)
		}
	}
	for _, r := range []struct {
		name string
		res  int
	}{{"RLIMIT_AS", syscall.RLIMIT_AS}, {"RLIMIT_DATA", syscall.RLIMIT_DATA}} {
		var lim syscall.Rlimit
		if syscall.Getrlimit(r.res, &lim) == nil && lim.Cur != ^uint64(0) {
			desc += fmt.Sprintf(" %s %s", r.name, humanize.Bytes(lim.Cur))
		}
	}
	return desc
}

// readMemo reads the memo at path. A missing file is an empty memo; a
// corrupt or unreadable one is an empty memo and an error saying so.
func readMemo(path string) (memo, error) {
	m := memo{Version: memoVersion, Entries: map[string]memoEntry{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, err
	}
	var got memo
	if err := json.Unmarshal(data, &got); err != nil {
		return m, fmt.Errorf("%s is not a memo gpuguard can read (%v); it will be replaced at the next save, or delete it", path, err)
	}
	if got.Version != memoVersion || got.Entries == nil {
		return m, fmt.Errorf("%s has format version %d, not %d; it will be replaced at the next save", path, got.Version, memoVersion)
	}
	return got, nil
}

// memoOn says whether this run keeps a memo: --memo or --no-memo, else the
// policy's memo key. A resumed run continues its own values.
func (l *loop) memoOn() bool {
	if l.pol == nil || l.cfg.ResumeRun != "" {
		return false
	}
	switch l.cfg.Memo {
	case "on":
		return true
	case "off":
		return false
	}
	return l.pol.Memo()
}

// memoEntryKey is this run's memo key, from its policy, command and device
// (computed once: the device is probed).
func (l *loop) memoEntryKey() (key, device string) {
	if l.memoKey == "" {
		g := gpu.Open(l.pjob.Env, nil)
		l.memoDev = memoDevice(g.Devices())
		g.Close()
		cmd, _ := l.pol.MemoCommand(l.cfg.Argv)
		l.memoKey = memoKey(policyIdentity(l.pol), cmd, l.memoDev)
	}
	return l.memoKey, l.memoDev
}

// applyMemo starts a new run with the values the memo holds for its
// command, when the run keeps a memo.
func (l *loop) applyMemo(status *Status) {
	if !l.memoOn() {
		if l.pol != nil && l.cfg.Memo == "off" && l.pol.Memo() {
			status.Printf("memo: not used (--no-memo)")
		}
		return
	}
	l.memoFrom = maps.Clone(l.state.Policies.Values)
	path, err := memoPath()
	if err != nil {
		status.Printf("warning: %v", err)
		return
	}
	m, err := readMemo(path)
	if err != nil {
		status.Printf("warning: memo not used: %v", err)
	}
	key, device := l.memoEntryKey()
	e, ok := m.Entries[key]
	if !ok {
		if l.cfg.Memo == "on" {
			// Asked for by name: say why it did not apply.
			status.Printf("memo: not used: %s", memoMissWhy(m, l.pol, l.cfg.Argv, device))
		}
		return
	}
	vals := l.state.Policies.Values
	for _, k := range slices.Sorted(maps.Keys(e.From)) {
		v := e.From[k]
		// An unset knob is kept as the zero value: it matches a command
		// that leaves the knob unset too.
		if cur, has := vals[k]; !has && v != (policy.Value{}) || has && cur != v {
			status.Printf("memo: not used: the command's %s is %s, the memo's values were learned from %s", k, memoShow(cur, has), memoShow(v, v != (policy.Value{})))
			return
		}
	}
	for k, v := range e.To {
		vals[k] = v
	}
	status.Printf("%s", memoStartingLine(e, l.wd))
}

// memoShow is a knob's value in a memo message: "unset" for none.
func memoShow(v policy.Value, has bool) string {
	switch {
	case !has:
		return "unset"
	case v.Null:
		return "null"
	}
	return v.Text
}

// memoMissWhy says why the memo has no entry for this run: an entry for
// the same command learned on another device, or for the same policy and
// device with another command (naming the first word that differs), or
// none at all.
func memoMissWhy(m memo, pol *policy.Policy, argv []string, device string) string {
	cmd, masked := pol.MemoCommand(argv)
	id := policyIdentity(pol)
	left := ""
	if len(masked) > 0 {
		left = fmt.Sprintf("; the key leaves out %s", strings.Join(masked, ", "))
	}
	var other string
	for _, e := range m.Entries {
		switch {
		case e.Policy != id:
		case slices.Equal(e.Command, cmd) && e.Device != device:
			return fmt.Sprintf("its values for this command were learned on %s, and this run is on %s%s", e.Device, device, left)
		case e.Device == device && other == "":
			other = firstDifference(e.Command, cmd)
		}
	}
	if other != "" {
		return fmt.Sprintf("nothing remembered for this command on %s; the memo has values for this policy with another command (%s)%s", device, other, left)
	}
	return fmt.Sprintf("nothing remembered yet for this command under this policy on %s%s", device, left)
}

// firstDifference names the first word in which command b differs from a.
func firstDifference(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("word %d is %q there, %q here", i+1, a[i], b[i])
		}
	}
	return fmt.Sprintf("%d words there, %d here", len(a), len(b))
}

// memoStartingLine is what a run that starts from the memo says.
func memoStartingLine(e memoEntry, wd string) string {
	return fmt.Sprintf("memo: starting from the memo with %s, what run %s ended with on %s on %s (the command gives %s); --no-memo starts from the command's own values",
		describeValues(e.To), displayPath(e.Run, wd), e.At.Format(time.DateTime), e.Device, memoFromWords(e.From))
}

// memoFromWords is the command's own values as an entry keeps them, an
// unset knob as "unset".
func memoFromWords(from policy.Values) string {
	parts := make([]string, 0, len(from))
	for _, k := range slices.Sorted(maps.Keys(from)) {
		parts = append(parts, k+"="+memoShow(from[k], from[k] != (policy.Value{})))
	}
	return strings.Join(parts, " ")
}

// memoRememberedLine is what a run that kept its values in the memo says.
func memoRememberedLine(to policy.Values, path, device string) string {
	return fmt.Sprintf("memo: remembered %s in %s for the next run of this command on %s", describeValues(to), path, device)
}

// memoHook saves the values a successful run ended with in the memo.
// Registered when the run keeps a memo (memoOn).
type memoHook struct{ l *loop }

func (h memoHook) finish(_, code int) {
	if code == 0 {
		h.l.saveMemo()
	}
}

// saveMemo records the values a successful run ended with, when they differ
// from the command's own (and forgets the entry when they no longer do).
func (l *loop) saveMemo() {
	if l.memoFrom == nil {
		return
	}
	from, to := policy.Values{}, policy.Values{}
	for k, v := range l.state.Policies.Values {
		if old, had := l.memoFrom[k]; !had || old != v {
			to[k] = v
			from[k] = old
		}
	}
	path, err := memoPath()
	if err != nil {
		l.job.Status.Printf("warning: cannot remember the values that fit: %v", err)
		return
	}
	key, device := l.memoEntryKey()
	var entry *memoEntry
	if len(to) > 0 {
		cmd, _ := l.pol.MemoCommand(l.cfg.Argv)
		entry = &memoEntry{Command: redact.Argv(cmd), Policy: policyIdentity(l.pol), Device: device,
			From: from, To: to, Run: l.job.RunDir.Path(), At: time.Now().UTC()}
	}
	changed, err := updateMemo(path, key, entry)
	if err != nil {
		l.job.Status.Printf("warning: cannot remember the values that fit: %v", err)
		return
	}
	if changed && entry != nil {
		l.job.Status.Printf("%s", memoRememberedLine(to, path, device))
	}
}

// updateMemo sets (entry non-nil) or removes the entry key in the memo at
// path, under an exclusive lock so that concurrent runs merge their entries,
// and replaces the file atomically. It reports whether it wrote.
func updateMemo(path, key string, entry *memoEntry) (bool, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return false, fmt.Errorf("locking %s: %v", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	m, _ := readMemo(path) // a corrupt memo is replaced
	if old, ok := m.Entries[key]; ok && entry != nil && sameEntry(old, *entry) {
		return false, nil // a run that started from the memo and fitted: nothing new
	}
	if entry == nil {
		if _, ok := m.Entries[key]; !ok {
			return false, nil
		}
		delete(m.Entries, key)
	} else {
		m.Entries[key] = *entry
	}
	return true, writeMemo(path, m)
}

// writeMemo replaces path with m, written whole (fsutil.WriteFileAtomic),
// readable by the user only, as before.
func writeMemo(path string, m memo) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// sameEntry: a and b remember the same values for the same command.
func sameEntry(a, b memoEntry) bool {
	return a.Device == b.Device && a.Policy == b.Policy && slices.Equal(a.Command, b.Command) &&
		maps.Equal(a.From, b.From) && maps.Equal(a.To, b.To)
}
