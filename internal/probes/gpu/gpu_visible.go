package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuguard/gpuguard/internal/envlist"
)

// This file resolves CUDA_VISIBLE_DEVICES to NVML devices. It is pure (no
// NVML): the NVML probe describes the machine as gpuIdentity values and asks
// gpuResolveVisible which of them the job uses.
//
// The rules follow CUDA's (CUDA programming guide, "Environment variables"):
//   - unset: every GPU is visible;
//   - set but empty (or "-1", "NoDevFiles"): no GPU is visible;
//   - a comma-separated list of entries, each an integer index, a "GPU-"
//     UUID or a unique prefix of one, a "MIG-" UUID (or unique prefix), or
//     the pre-R470 "MIG-GPU-<uuid>/<gpu instance>/<compute instance>" form;
//     CUDA ignores the first invalid entry and everything after it, and so
//     does gpuguard.
//
// Integers are CUDA ordinals, which match NVML's (PCI bus) order only when
// CUDA_DEVICE_ORDER=PCI_BUS_ID; CUDA's default, FASTEST_FIRST, may order
// mixed GPUs differently. Without PCI_BUS_ID (and with more than one GPU) the
// result is marked uncertain and the probe later narrows it to the devices
// where NVML lists the job's processes. The same holds when the variable is
// unset on a machine with several GPUs: a job usually uses only some of them.

// gpuIdentity describes one physical GPU for resolution.
type gpuIdentity struct {
	Index int
	UUID  string
	Name  string
	MIG   []gpuMIGIdentity // MIG devices, when MIG mode is on
}

// gpuMIGIdentity describes one MIG device of a GPU.
type gpuMIGIdentity struct {
	UUID string
	GI   int // GPU instance id
	CI   int // compute instance id
}

// gpuSelection is one device the job uses: Phys indexes the identities, MIG
// is -1 for the whole GPU or the index into its MIG list.
type gpuSelection struct {
	Phys    int
	MIG     int
	Ordinal int
	Entry   string // the CUDA_VISIBLE_DEVICES entry, "" when unset
}

// gpuVisibility is what gpuResolveVisible concluded.
type gpuVisibility struct {
	Selected []gpuSelection
	// Uncertain: the selection is a guess; prefer the devices where the job's
	// processes show up.
	Uncertain bool
	// Notes explain anything surprising (invalid entries, order caveats), one
	// sentence each, for the log and for doctor.
	Notes []string
}

// gpuResolveVisible applies CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER from
// env to the machine's GPUs (devs, in NVML index order).
func gpuResolveVisible(env []string, devs []gpuIdentity) gpuVisibility {
	cvd, set := envlist.Lookup(env, "CUDA_VISIBLE_DEVICES")
	order, _ := envlist.Lookup(env, "CUDA_DEVICE_ORDER")
	var v gpuVisibility
	if !set {
		for i := range devs {
			v.Selected = append(v.Selected, gpuSelection{Phys: i, MIG: -1, Ordinal: i})
		}
		if len(devs) > 1 {
			v.Uncertain = true
			v.Notes = append(v.Notes, fmt.Sprintf("CUDA_VISIBLE_DEVICES is not set: the job may use any of the %d GPUs; "+
				"gpuguard samples the ones where NVML lists the job's processes, all of them until then", len(devs)))
		}
		return v
	}
	cvd = strings.TrimSpace(cvd)
	if cvd == "" || cvd == "-1" || strings.EqualFold(cvd, "NoDevFiles") {
		v.Notes = append(v.Notes, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q hides every GPU from the job", cvd))
		return v
	}
	seen := map[[2]int]bool{}
	usesIndex := false
	for _, raw := range strings.Split(cvd, ",") {
		e := strings.TrimSpace(raw)
		sel, ok, why := gpuResolveEntry(e, devs)
		if !ok {
			v.Notes = append(v.Notes, fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %q %s; CUDA ignores it and every entry after it", e, why))
			break
		}
		key := [2]int{sel.Phys, sel.MIG}
		if seen[key] {
			v.Notes = append(v.Notes, fmt.Sprintf("CUDA_VISIBLE_DEVICES names device %q twice; counted once", e))
			continue
		}
		seen[key] = true
		if _, err := strconv.Atoi(e); err == nil {
			usesIndex = true
		}
		sel.Ordinal = len(v.Selected)
		sel.Entry = e
		v.Selected = append(v.Selected, sel)
	}
	if usesIndex && len(devs) > 1 && !strings.EqualFold(strings.TrimSpace(order), "PCI_BUS_ID") {
		v.Uncertain = true
		v.Notes = append(v.Notes, "CUDA_VISIBLE_DEVICES uses indices but CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA's numbering "+
			"may differ from NVML's (nvidia-smi's); gpuguard will use the devices where NVML lists the job's processes. "+
			"Set CUDA_DEVICE_ORDER=PCI_BUS_ID or use GPU UUIDs to remove the doubt")
	}
	return v
}

// gpuResolveEntry resolves one CUDA_VISIBLE_DEVICES entry; why says what is
// wrong with an entry that does not resolve.
func gpuResolveEntry(e string, devs []gpuIdentity) (gpuSelection, bool, string) {
	if e == "" {
		return gpuSelection{}, false, "is empty"
	}
	if n, err := strconv.Atoi(e); err == nil {
		if n < 0 || n >= len(devs) {
			return gpuSelection{}, false, fmt.Sprintf("is out of range (this machine has %d GPUs)", len(devs))
		}
		return gpuSelection{Phys: n, MIG: -1}, true, ""
	}
	up := strings.ToUpper(e)
	switch {
	case strings.HasPrefix(up, "MIG-GPU-"):
		// Pre-R470 form: MIG-GPU-<gpu uuid>/<gi>/<ci>.
		parts := strings.Split(e[len("MIG-"):], "/")
		if len(parts) != 3 {
			return gpuSelection{}, false, "is not of the form MIG-GPU-<uuid>/<gpu instance>/<compute instance>"
		}
		gi, err1 := strconv.Atoi(parts[1])
		ci, err2 := strconv.Atoi(parts[2])
		if err1 != nil || err2 != nil {
			return gpuSelection{}, false, "has instance ids that are not numbers"
		}
		for p, d := range devs {
			if !strings.EqualFold(d.UUID, parts[0]) {
				continue
			}
			for m, mig := range d.MIG {
				if mig.GI == gi && mig.CI == ci {
					return gpuSelection{Phys: p, MIG: m}, true, ""
				}
			}
			return gpuSelection{}, false, fmt.Sprintf("names GPU instance %d / compute instance %d, which GPU %d does not have", gi, ci, d.Index)
		}
		return gpuSelection{}, false, "names a GPU that NVML does not list"
	case strings.HasPrefix(up, "MIG-"):
		var found []gpuSelection
		for p, d := range devs {
			for m, mig := range d.MIG {
				if strings.HasPrefix(strings.ToUpper(mig.UUID), up) {
					found = append(found, gpuSelection{Phys: p, MIG: m})
				}
			}
		}
		return gpuPickOne(found)
	case strings.HasPrefix(up, "GPU-"):
		var found []gpuSelection
		for p, d := range devs {
			if strings.HasPrefix(strings.ToUpper(d.UUID), up) {
				found = append(found, gpuSelection{Phys: p, MIG: -1})
			}
		}
		return gpuPickOne(found)
	}
	return gpuSelection{}, false, "is neither an index nor a GPU-/MIG- UUID"
}

func gpuPickOne(found []gpuSelection) (gpuSelection, bool, string) {
	switch len(found) {
	case 0:
		return gpuSelection{}, false, "matches no device NVML lists"
	case 1:
		return found[0], true, ""
	}
	return gpuSelection{}, false, fmt.Sprintf("is a prefix of %d device UUIDs (ambiguous)", len(found))
}
