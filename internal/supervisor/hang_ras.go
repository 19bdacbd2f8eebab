package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// NCCL's RAS client, the hang watchdog's view of a job's collectives. NCCL
// 2.24 and later run a RAS thread in every process of a job; `ncclras` on
// any node of the job asks them for the state of every communicator
// (localhost:28028) and prints a text report:
//
//	Communicators... (2.05s)
//	=============
//
//	Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
//	    #  in group  per comm  per node  per comm  in group
//	    0         1         4       7-8        32        32   RUNNING  INCOMPLETE
//
//	Errors
//	======
//
//	INCOMPLETE
//	  Missing communicator data from 1 job process
//	  Process 3487984 on node 172.16.64.213 managing GPU 5
//
// When a hang is suspected, the watchdog runs it (within rasTimeout, while
// it watches the tree, so it adds no delay of its own) and puts its summary
// in the evidence. A report of a rank missing or dead (INCOMPLETE, DEAD)
// confirms a spin: the collective cannot finish.

const (
	// rasTimeout bounds one ncclras: RAS waits for an unresponsive
	// process a few seconds before it routes around it.
	rasTimeout = 10 * time.Second
	rasMax     = 64 << 10
)

// rasResult is one run of ncclras.
type rasResult struct {
	report  string // what it printed (cut at rasMax)
	summary string // the report in one line ("" when it gave none)
	missing bool   // a rank or process is missing or dead: the collective cannot finish
	err     string // why there is no report
}

// runNCCLRAS runs bin (ncclras) and reads its report. It never runs longer
// than ctx allows.
func runNCCLRAS(ctx context.Context, bin string) rasResult {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	text := out.String()
	if len(text) > rasMax {
		text = text[:rasMax] + "\n[truncated]"
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no report within %s", rasTimeout)
		}
		return rasResult{err: fmt.Sprintf("%s: %v: %s", bin, err, strings.TrimSpace(text))}
	}
	r := rasResult{report: text}
	r.summary, r.missing = rasSummary(text)
	if r.summary == "" {
		r.err = fmt.Sprintf("%s printed no communicator table (no NCCL communicator on this node?); its report is kept as it is", bin)
	}
	return r
}

// rasSummary reads ncclras's text report: the status and errors of each
// group of communicators, and what its Errors section says of missing or
// dead ranks and processes (their nodes and GPUs). missing: a rank or
// process is missing (INCOMPLETE) or dead.
func rasSummary(report string) (summary string, missing bool) {
	section := ""
	var groups, errs []string
	seen := map[string]bool{}
	add := func(list *[]string, s string) {
		if !seen[s] && len(*list) < 8 {
			seen[s] = true
			*list = append(*list, s)
		}
	}
	lines := strings.Split(report, "\n")
	for i, ln := range lines {
		t := strings.TrimSpace(ln)
		if i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "===") && t != "" {
			switch {
			case strings.HasPrefix(t, "Communicators"):
				section = "comms"
			case t == "Errors":
				section = "errors"
			default:
				section = "" // Job summary, Warnings
			}
			continue
		}
		f := strings.Fields(t)
		switch section {
		case "comms":
			// A row: group number first, status and errors last.
			if len(f) >= 8 && f[0] >= "0" && f[0] <= "9" {
				status, e := f[len(f)-2], f[len(f)-1]
				comms := "communicators"
				if f[1] == "1" {
					comms = "communicator"
				}
				add(&groups, fmt.Sprintf("group %s (%s %s of %s ranks): %s %s", f[0], f[1], comms, f[4], status, e))
				if e == "INCOMPLETE" {
					missing = true
				}
			}
		case "errors":
			switch {
			case t == "DEAD":
				missing = true
			case strings.HasPrefix(t, "Process "), strings.HasPrefix(t, "The missing rank"),
				strings.Contains(t, "considered dead"), strings.HasPrefix(t, "Missing communicator data"):
				add(&errs, t)
			}
		}
	}
	if len(groups) == 0 {
		return "", false
	}
	summary = strings.Join(groups, "; ")
	if len(errs) > 0 {
		summary += "; " + strings.Join(errs, "; ")
	}
	return summary, missing
}

// rasProbe runs ncclras for one window of the watchdog: start it as the
// window opens, collect it when the window closes.
type rasProbe struct {
	done   chan rasResult
	cancel context.CancelFunc
}

// startNCCLRAS starts ncclras when bin is set ("": not on PATH).
func startNCCLRAS(bin string) *rasProbe {
	if bin == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), rasTimeout)
	p := &rasProbe{done: make(chan rasResult, 1), cancel: cancel}
	go func() { p.done <- runNCCLRAS(ctx, bin) }()
	return p
}

// wait returns its result (nil probe: none); abort, when it is closed,
// stops the wait (the attempt ended) and the result is dropped.
func (p *rasProbe) wait(abort <-chan struct{}) (rasResult, bool) {
	if p == nil {
		return rasResult{}, false
	}
	defer p.cancel()
	select {
	case r := <-p.done:
		return r, true
	case <-abort:
		return rasResult{}, false
	}
}

// note adds the RAS result to the verdict: its summary in the evidence and
// in the words; missing ranks confirm a spin as a collective's.
func (r rasResult) note(v *record.HangActivity) (confirms bool) {
	v.NCCLRAS, v.NCCLRASError = r.summary, r.err
	if r.summary != "" {
		v.Detail += "; NCCL RAS: " + r.summary
	}
	return r.missing && v.Verdict == "spinning"
}
