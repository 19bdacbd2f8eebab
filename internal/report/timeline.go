package report

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// timelineInfo is what one pass over timeline.csv learns: per-attempt
// peaks (for attempts whose memory event is missing), validation intervals
// and the time span (for the plot).
type timelineInfo struct {
	rows       int
	minMs      int64
	maxMs      int64
	devices    []string // in first-seen order
	capacity   map[string]uint64
	attempts   map[int]*record.MemorySummary
	valSpans   []span // validation, by attempt, in time order
	attemptsAt []span // first and last sample of each attempt
}

type span struct {
	attempt    int
	start, end int64
}

// scanTimeline reads a timeline once, keeping only aggregates.
func scanTimeline(path string) (*timelineInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := &timelineScan{
		ti:      &timelineInfo{capacity: map[string]uint64{}, attempts: map[int]*record.MemorySummary{}},
		acc:     map[int]map[classify.Phase]*record.PhaseSummary{},
		seenDev: map[string]bool{},
		lastMs:  map[int]int64{},
	}
	err = record.ReadTimeline(f, func(r record.TimelineRow) error {
		sc.extent(r)
		sc.spans(r)
		sc.peak(sc.phase(r), r)
		return nil
	})
	if err != nil {
		return sc.ti, fmt.Errorf("%s: %w", path, err)
	}
	sc.summarize()
	return sc.ti, nil
}

// timelineScan is scanTimeline's state between rows.
type timelineScan struct {
	ti         *timelineInfo
	acc        map[int]map[classify.Phase]*record.PhaseSummary // per attempt and phase
	seenDev    map[string]bool
	lastMs     map[int]int64 // per attempt, its last sample's time
	cur        *span         // open validation span
	curAttempt *span
}

// extent follows the time span, the devices in first-seen order and each
// device's capacity.
func (sc *timelineScan) extent(r record.TimelineRow) {
	ti := sc.ti
	if ti.rows == 0 || r.ElapsedMs < ti.minMs {
		ti.minMs = r.ElapsedMs
	}
	if ti.rows == 0 || r.ElapsedMs > ti.maxMs {
		ti.maxMs = r.ElapsedMs
	}
	ti.rows++
	if !sc.seenDev[r.Device] {
		sc.seenDev[r.Device] = true
		ti.devices = append(ti.devices, r.Device)
	}
	if r.LimitBytes > ti.capacity[r.Device] || r.Device == "host" && r.LimitBytes > 0 {
		ti.capacity[r.Device] = r.LimitBytes // host: the last, an rlimit read after the start
	}
}

// spans follows the attempts' spans and the validation spans within them.
func (sc *timelineScan) spans(r record.TimelineRow) {
	ti := sc.ti
	if sc.curAttempt == nil || sc.curAttempt.attempt != r.Attempt {
		ti.attemptsAt = append(ti.attemptsAt, span{attempt: r.Attempt, start: r.ElapsedMs, end: r.ElapsedMs})
		sc.curAttempt = &ti.attemptsAt[len(ti.attemptsAt)-1]
		sc.cur = nil
	}
	sc.curAttempt.end = r.ElapsedMs
	if r.Phase == classify.PhaseVal {
		if sc.cur == nil {
			ti.valSpans = append(ti.valSpans, span{attempt: r.Attempt, start: r.ElapsedMs, end: r.ElapsedMs})
			sc.cur = &ti.valSpans[len(ti.valSpans)-1]
		}
		sc.cur.end = r.ElapsedMs
	} else {
		sc.cur = nil
	}
}

// phase is the summary of the row's attempt and phase, its sample counted:
// the rows of one sample (one per device) share its time.
func (sc *timelineScan) phase(r record.TimelineRow) *record.PhaseSummary {
	sum := sc.ti.attempts[r.Attempt]
	if sum == nil {
		sum = &record.MemorySummary{Attempt: r.Attempt, FirstMs: r.ElapsedMs}
		sc.ti.attempts[r.Attempt] = sum
		sc.acc[r.Attempt] = map[classify.Phase]*record.PhaseSummary{}
	}
	newSample := false
	if lm, ok := sc.lastMs[r.Attempt]; !ok || lm != r.ElapsedMs {
		sum.Samples++
		sc.lastMs[r.Attempt] = r.ElapsedMs
		newSample = true
	}
	sum.LastMs = r.ElapsedMs
	ps := sc.acc[r.Attempt][r.Phase]
	if ps == nil {
		ps = &record.PhaseSummary{Phase: r.Phase}
		sc.acc[r.Attempt][r.Phase] = ps
	}
	if newSample {
		ps.Samples++
	}
	return ps
}

// peak takes the row's device's figures into the phase's peaks.
func (sc *timelineScan) peak(ps *record.PhaseSummary, r record.TimelineRow) {
	switch {
	case r.Device == "host":
		if r.UsedBytes > ps.HostPeakBytes {
			ps.HostPeakBytes, ps.HostPeakMs = r.UsedBytes, r.ElapsedMs
		}
		ps.HostLimitBytes = r.LimitBytes
	case r.Device == "cgroup":
		ps.CgroupPeakBytes = max(ps.CgroupPeakBytes, r.UsedBytes)
		ps.CgroupLimitBytes = r.LimitBytes
	case r.Device == "ram":
		ps.RAMPeakBytes = max(ps.RAMPeakBytes, r.UsedBytes)
		ps.RAMTotalBytes = r.LimitBytes
	default:
		var dp *record.DevicePeak
		for i := range ps.GPU {
			if ps.GPU[i].ID == r.Device {
				dp = &ps.GPU[i]
			}
		}
		if dp == nil {
			ps.GPU = append(ps.GPU, record.DevicePeak{ID: r.Device})
			dp = &ps.GPU[len(ps.GPU)-1]
		}
		if r.UsedBytes > dp.PeakBytes {
			dp.PeakBytes, dp.PeakMs = r.UsedBytes, r.ElapsedMs
		}
		dp.CapacityBytes = r.LimitBytes
		if r.JobKnown {
			dp.PeakJobBytes = max(dp.PeakJobBytes, r.JobBytes)
		}
	}
}

// summarize puts each attempt's phases in its summary, in phase order, with
// the headroom and peak fractions their peaks and limits give.
func (sc *timelineScan) summarize() {
	for n, phases := range sc.acc {
		sum := sc.ti.attempts[n]
		for _, ps := range phases {
			sort.Slice(ps.GPU, func(i, j int) bool { return deviceLess(ps.GPU[i].ID, ps.GPU[j].ID) })
			for i := range ps.GPU {
				dp := &ps.GPU[i]
				if dp.CapacityBytes > dp.PeakBytes {
					dp.HeadroomBytes = dp.CapacityBytes - dp.PeakBytes
				}
				if dp.CapacityBytes > 0 {
					ps.PeakFraction = max(ps.PeakFraction, float64(dp.PeakBytes)/float64(dp.CapacityBytes))
				}
			}
			if ps.HostLimitBytes > 0 {
				ps.HostPeakFraction = float64(ps.HostPeakBytes) / float64(ps.HostLimitBytes)
			}
			sum.Phases = append(sum.Phases, *ps)
		}
		sort.Slice(sum.Phases, func(i, j int) bool { return sum.Phases[i].Phase.Less(sum.Phases[j].Phase) })
	}
}

// deviceLess orders gpu2 before gpu10, GPUs before host, cgroup, ram.
func deviceLess(a, b string) bool {
	ka, kb := deviceKey(a), deviceKey(b)
	if ka != kb {
		return ka < kb
	}
	return a < b
}

func deviceKey(d string) string {
	switch d {
	case "host":
		return "1"
	case "cgroup":
		return "2"
	case "ram":
		return "3"
	}
	// gpu<N>[.mig<M>]: pad the index so that numbers sort.
	if strings.HasPrefix(d, "gpu") {
		num := strings.TrimPrefix(d, "gpu")
		rest := ""
		if i := strings.IndexByte(num, '.'); i >= 0 {
			num, rest = num[:i], num[i:]
		}
		return "0" + fmt.Sprintf("%06s", num) + rest
	}
	return "4" + d
}
