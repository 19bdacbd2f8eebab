package record

import "github.com/gpuguard/gpuguard/internal/probes/classify"

// Events of a group: the gpuguards of one multi-node job deciding as one
// (internal/group, docs/slurm.md "One decision for the whole job").

// Group roles.
const (
	GroupLeader = "leader"
	GroupMember = "member"
)

// GroupJoin is this gpuguard's place in its group, written once every
// member has joined (the leader) or once the leader answered (a member).
type GroupJoin struct {
	Role   string `json:"role"` // GroupLeader or GroupMember
	Rank   int    `json:"rank"`
	Size   int    `json:"size"`
	Host   string `json:"host"`
	ID     string `json:"id,omitempty"`
	Where  string `json:"where"`            // the leader's address, or its file in the rendezvous directory
	Leader string `json:"leader,omitempty"` // a member: the address it joined
	From   string `json:"from"`             // where rank and size came from
	// Members: the leader's list of the members' hosts, by rank.
	Members map[int]string `json:"members,omitempty"`
}

// GroupStop is a peer's failure, as the leader told this gpuguard (a
// member, or the leader itself when another member failed): its job gets
// oom_grace to exit, then it is stopped. Written when the grace ends or
// the job ended first.
type GroupStop struct {
	Attempt int           `json:"attempt"`
	Rank    int           `json:"rank"` // the member whose job failed
	Host    string        `json:"host"`
	Kind    classify.Kind `json:"kind"`
	Text    string        `json:"text,omitempty"`
	GraceS  float64       `json:"grace_s"`
	// Stopped: the job had not exited within the grace and was stopped.
	Stopped bool `json:"stopped,omitempty"`
}

// GroupMemberReport is one member's attempt as the leader heard it.
type GroupMemberReport struct {
	Rank           int           `json:"rank"`
	Host           string        `json:"host"`
	ExitCode       int           `json:"exit_code"`
	Kind           classify.Kind `json:"kind"`
	FailedAt       string        `json:"failed_at,omitempty"` // RFC 3339, the first failure line
	StoppedForPeer bool          `json:"stopped_for_peer,omitempty"`
}

// GroupDecision is the decision the group took after an attempt: from
// which member's failure (the first), and what every member does. The
// leader and each member write it; the policy's decision itself is the
// Decision event beside it.
type GroupDecision struct {
	Attempt  int           `json:"attempt"`
	Role     string        `json:"role"`
	Verb     string        `json:"verb"`
	FromRank *int          `json:"from_rank,omitempty"` // the member whose failure decided
	FromHost string        `json:"from_host,omitempty"`
	Kind     classify.Kind `json:"kind,omitempty"`
	FailedAt string        `json:"failed_at,omitempty"`
	// Reports: each member's attempt (the leader's event only).
	Reports []GroupMemberReport `json:"reports,omitempty"`
	Knobs   map[string]Value    `json:"knobs"`
	Reason  string              `json:"reason,omitempty"`
}

// GroupLost is a peer lost for longer than the group's timeout: the run
// gives up without relaunching.
type GroupLost struct {
	Attempt  int     `json:"attempt"`
	Error    string  `json:"error"`
	TimeoutS float64 `json:"timeout_s"`
}

func (GroupJoin) EventType() string     { return "group_join" }
func (GroupStop) EventType() string     { return "group_stop" }
func (GroupDecision) EventType() string { return "group_decision" }
func (GroupLost) EventType() string     { return "group_lost" }
