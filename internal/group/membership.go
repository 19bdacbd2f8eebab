// Package group makes the gpuguards of one multi-node job decide as one.
//
// With one gpuguard per node (srun gpuguard run -- torchrun ..., or one
// gpuguard per node started by hand outside Slurm), each gpuguard sees only
// its own node's ranks: when a rank on one node runs out of memory, the
// ranks on the others die of a broken collective or hang until NCCL's
// timeout. Alone, each gpuguard would decide from what it saw, and the nodes
// would relaunch with different settings. In a group, one gpuguard (the
// member of rank 0) leads:
//
//   - every member tells the leader as soon as its job prints an
//     out-of-memory line, and reports how each attempt ended (Report);
//   - the leader tells every other member to stop its job within oom_grace
//     (Stop), so that ranks hung in a collective do not wait for NCCL;
//   - once every member's attempt has ended, the leader picks the first
//     failure (First: an out-of-memory error on any node beats the broken
//     collectives it caused elsewhere), asks the policy, and sends every
//     member the decision (Decision) and then the go for the next attempt
//     (Go) with the same knob values and checkpoint: a barrier, since it
//     is sent only after every member has stopped;
//   - a member that cannot reach its leader within the bound gives up.
//
// What is pure here (membership from flags, environment and the command
// line; the round of one attempt; the choice of the first failure) is
// tested with tables; Leader and Member are the thin TCP side, newline-
// delimited JSON messages of a versioned protocol (Msg).
package group

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/slurmenv"
)

// DefaultTimeout bounds every wait on a peer that says nothing: joining,
// a leader (or member) that stopped answering, a reconnection.
const DefaultTimeout = 60 * time.Second

// LeaderFile is the file in a rendezvous directory where the leader writes
// the address it listens on.
const LeaderFile = "leader.json"

// Spec is one gpuguard's place in a group.
type Spec struct {
	// Addr is the leader's address (HOST:PORT); the leader listens on its
	// port. "" when the leader is found through Dir.
	Addr string
	// Dir is the rendezvous directory (shared by every node): the leader
	// listens on a free port and writes LeaderFile there.
	Dir string
	// ID names the group; a member whose ID differs is refused (a stale
	// leader file of an earlier run, another job's leader).
	ID   string
	Rank int // this member's rank; 0 leads
	Size int // the members, the leader included
	Host string
	// Timeout bounds joining and every silence of a peer.
	Timeout time.Duration
	// From says where rank and size came from, for the start line.
	From string
}

// Leads reports whether this member is the group's leader.
func (s Spec) Leads() bool { return s.Rank == 0 }

// Where is the rendezvous in words: the address, or the directory.
func (s Spec) Where() string {
	if s.Addr != "" {
		return s.Addr
	}
	return filepath.Join(s.Dir, LeaderFile)
}

// Flags are the command line's group flags; Rank and Size are -1 when not
// given.
type Flags struct {
	Group   string // "", "auto", "off", HOST:PORT, or a directory
	Rank    int
	Size    int
	Timeout time.Duration
}

// Resolve says whether this gpuguard is part of a group, and its place in
// it, from the flags, the command it runs (argv: torchrun's --node-rank and
// --nnodes), the environment (Slurm's task variables), the working
// directory wd and the host name. It is pure. ok is false when there is no
// group: --group off, or no --group outside a Slurm step of several tasks.
func Resolve(f Flags, argv, env []string, wd, host string) (spec Spec, ok bool, err error) {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	sc := slurmenv.FromEnv(env)
	slurmStep := sc.JobID != "" && sc.StepID != "" && sc.ProcID != nil && sc.NTasks > 1
	switch f.Group {
	case "off":
		return Spec{}, false, nil
	case "", "auto":
		if !slurmStep {
			return Spec{}, false, nil
		}
		// The tasks of one Slurm step: each task's rank and the step's
		// task count; the leader's address in the run directories' folder,
		// which every node sees (docs/slurm.md).
		id := sc.JobID
		if sc.ArrayTaskID != "" {
			id = sc.ArrayJobID + "_" + sc.ArrayTaskID
		}
		spec = Spec{
			Dir:  filepath.Join(wd, ".gpuguard", "runs", "slurm-"+id+"-group"),
			ID:   fmt.Sprintf("slurm-%s.%s-restart%d", id, sc.StepID, sc.Restarts()),
			Rank: *sc.ProcID, Size: sc.NTasks, Host: host, Timeout: timeout,
			From: "Slurm (SLURM_PROCID, SLURM_NTASKS)",
		}
		return spec, true, nil
	}
	spec = Spec{Host: host, Timeout: timeout, Rank: f.Rank, Size: f.Size, From: "--group-rank, --group-size"}
	if looksLikeAddr(f.Group) {
		if _, _, err := net.SplitHostPort(f.Group); err != nil {
			return Spec{}, false, fmt.Errorf("--group %q: %v (give HOST:PORT, the leader's address, or a directory every node sees)", f.Group, err)
		}
		spec.Addr = f.Group
	} else {
		spec.Dir = f.Group
	}
	tr := torchrunArgs(argv)
	if spec.Rank < 0 || spec.Size < 0 {
		switch {
		case tr.rank != nil && tr.nnodes != nil:
			if spec.Rank < 0 {
				spec.Rank = *tr.rank
			}
			if spec.Size < 0 {
				spec.Size = *tr.nnodes
			}
			spec.From = "torchrun's --node-rank and --nnodes"
		case slurmStep:
			if spec.Rank < 0 {
				spec.Rank = *sc.ProcID
			}
			if spec.Size < 0 {
				spec.Size = sc.NTasks
			}
			spec.From = "Slurm (SLURM_PROCID, SLURM_NTASKS)"
		}
	}
	if tr.err != nil && (f.Rank < 0 || f.Size < 0) {
		return Spec{}, false, tr.err
	}
	if spec.Rank < 0 || spec.Size < 0 {
		return Spec{}, false, fmt.Errorf("--group %s: this member's rank and the group's size are unknown: give --group-rank and --group-size, or run torchrun with --node-rank and --nnodes", f.Group)
	}
	if spec.Size < 1 || spec.Rank >= spec.Size {
		return Spec{}, false, fmt.Errorf("--group %s: rank %d is not in a group of %d (ranks 0 to size-1; from %s)", f.Group, spec.Rank, spec.Size, spec.From)
	}
	spec.ID = tr.rdzvID
	if spec.ID == "" && slurmStep {
		spec.ID = fmt.Sprintf("slurm-%s.%s-restart%d", sc.JobID, sc.StepID, sc.Restarts())
	}
	return spec, true, nil
}

// looksLikeAddr tells HOST:PORT from a directory: a port after the last
// colon, and no slash.
func looksLikeAddr(s string) bool {
	if strings.Contains(s, "/") {
		return false
	}
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return false
	}
	_, err := strconv.Atoi(s[i+1:])
	return err == nil
}

type torchrun struct {
	rank, nnodes *int
	rdzvID       string
	err          error
}

// torchrunArgs reads torchrun's --node-rank (--node_rank) and --nnodes
// from a command that runs torchrun (torchrun ..., python -m
// torch.distributed.run ...): the launcher's options, up to the training
// script (the first argument ending in .py, or after --).
func torchrunArgs(argv []string) torchrun {
	var t torchrun
	start := -1
	for i, a := range argv {
		base := filepath.Base(a)
		if base == "torchrun" || a == "torch.distributed.run" || a == "torch.distributed.launch" {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return t
	}
	for i := start; i < len(argv); i++ {
		a := argv[i]
		if a == "--" || strings.HasSuffix(a, ".py") {
			break
		}
		name, val, hasVal := strings.Cut(a, "=")
		switch name {
		case "--node-rank", "--node_rank", "--nnodes", "--rdzv-id", "--rdzv_id":
		default:
			continue
		}
		if !hasVal {
			if i+1 >= len(argv) {
				break
			}
			i++
			val = argv[i]
		}
		switch name {
		case "--rdzv-id", "--rdzv_id":
			t.rdzvID = val
		case "--node-rank", "--node_rank":
			n, err := strconv.Atoi(val)
			if err != nil {
				t.err = fmt.Errorf("torchrun's %s %q is not a number: give --group-rank", name, val)
				continue
			}
			t.rank = &n
		case "--nnodes":
			lo, hi, rng := strings.Cut(val, ":")
			n, err := strconv.Atoi(lo)
			if rng {
				m, err2 := strconv.Atoi(hi)
				if err == nil && err2 == nil && m != n {
					t.err = fmt.Errorf("torchrun's --nnodes %s is elastic: a group needs a fixed size, give --group-size", val)
					continue
				}
			}
			if err != nil {
				t.err = fmt.Errorf("torchrun's --nnodes %q is not a number: give --group-size", val)
				continue
			}
			t.nnodes = &n
		}
	}
	return t
}
