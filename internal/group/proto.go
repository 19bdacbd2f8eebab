package group

import (
	"time"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// Version is the protocol's version. A peer speaking another is refused
// with a message naming both.
const Version = 1

// Message types.
const (
	TypeHello    = "hello"    // member → leader: join (or rejoin) the group
	TypeWelcome  = "welcome"  // leader → member: joined; the latest go and decision
	TypeRefused  = "refused"  // leader → member: not joined, and why (Error)
	TypeOOM      = "oom"      // member → leader: the job printed an out-of-memory line
	TypeStop     = "stop"     // leader → member: stop the attempt within oom_grace
	TypeEnded    = "ended"    // member → leader: the attempt ended (Report)
	TypeDecision = "decision" // leader → member: what the group does after an attempt
	TypeGo       = "go"       // leader → member: start this attempt with these settings
	TypePing     = "ping"     // both ways: still here
)

// Msg is one line of the protocol: JSON, one object per line.
type Msg struct {
	V     int    `json:"v"`
	Type  string `json:"type"`
	Group string `json:"group,omitempty"`
	Rank  int    `json:"rank"`
	Size  int    `json:"size,omitempty"`
	Host  string `json:"host,omitempty"`
	// Attempt: the attempt the message is about.
	Attempt  int       `json:"attempt,omitempty"`
	Notice   *Notice   `json:"notice,omitempty"`   // oom, stop
	Report   *Report   `json:"report,omitempty"`   // ended
	Decision *Decision `json:"decision,omitempty"` // decision, welcome
	Go       *Go       `json:"go,omitempty"`       // go, welcome
	Error    string    `json:"error,omitempty"`    // refused
}

// Notice is a failure seen while the attempt runs: who saw it, when, and
// its line.
type Notice struct {
	Attempt int           `json:"attempt"`
	Rank    int           `json:"rank"` // the member (node) whose job printed it
	Host    string        `json:"host"`
	Kind    classify.Kind `json:"kind"`
	At      time.Time     `json:"at"`
	Text    string        `json:"text,omitempty"`
	// Grace: how long the member's job gets to exit by itself (oom_grace).
	GraceS float64 `json:"grace_s,omitempty"`
	// LeaderEnded: not a failure: the leader ended its run (Text says
	// why), and the member's job is stopped at once.
	LeaderEnded bool `json:"leader_ended,omitempty"`
}

// Report is how one member's attempt ended: what the classifier made of its
// output, how its processes ended, and when its first failure line came.
type Report struct {
	Rank    int              `json:"rank"` // the member's rank
	Host    string           `json:"host"`
	Attempt int              `json:"attempt"`
	Verdict classify.Verdict `json:"verdict"`
	Exit    classify.Exit    `json:"exit"`
	// FailedAt is when the first failure line of the attempt was read;
	// zero when there was none.
	FailedAt time.Time `json:"failed_at,omitzero"`
	// StoppedForPeer: the member stopped its job because the leader said a
	// peer had failed.
	StoppedForPeer bool                       `json:"stopped_for_peer,omitempty"`
	Peaks          map[classify.Phase]float64 `json:"peaks,omitempty"`
	Starts         map[classify.Phase]float64 `json:"starts,omitempty"` // memory in use when each phase began, as a fraction of the GPU (fit's fixed part)
	Rejections     []string                   `json:"rejections,omitempty"`
	Block          *policy.OOMBlock           `json:"block,omitempty"` // where in the model the OOM struck (the torch probe)
	StartStep      *int64                     `json:"start_step,omitempty"`
	Terminated     bool                       `json:"terminated,omitempty"`
}

// Failed reports whether the attempt failed.
func (r Report) Failed() bool { return r.Exit.Code != 0 || r.Exit.Signal != 0 }

// Decision is what the leader decided after an attempt, for every member.
type Decision struct {
	Attempt int          `json:"attempt"`
	Verb    policy.Verb  `json:"verb"` // relaunch, give_up, done, or stop (the leader ended for another reason)
	Label   string       `json:"label"`
	Line    string       `json:"line"` // the leader's status line for it
	Reason  string       `json:"reason,omitempty"`
	State   policy.State `json:"state"`
	// From is the failure the leader decided from (nil: every member's
	// attempt succeeded, or none failed first).
	From *Report `json:"from,omitempty"`
	// Decision is the policy's decision as it was made.
	Policy *policy.Decision `json:"policy,omitempty"`
}

// Go starts an attempt: every member runs attempt Attempt with the knob
// values of State and resumes from Checkpoint.
type Go struct {
	Attempt    int          `json:"attempt"`
	State      policy.State `json:"state"`
	Checkpoint string       `json:"checkpoint,omitempty"`
}
