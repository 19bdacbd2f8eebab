package gpu

import (
	"strings"
	"testing"
)

// visMachine is a 4-GPU machine whose GPU 2 is in MIG mode with two
// instances.
func visMachine() []gpuIdentity {
	return []gpuIdentity{
		{Index: 0, UUID: "GPU-0a1b2c3d-0000-0000-0000-000000000000", Name: "NVIDIA A100-SXM4-40GB"},
		{Index: 1, UUID: "GPU-0a1b9999-1111-1111-1111-111111111111", Name: "NVIDIA A100-SXM4-40GB"},
		{Index: 2, UUID: "GPU-77777777-2222-2222-2222-222222222222", Name: "NVIDIA A100-SXM4-40GB", MIG: []gpuMIGIdentity{
			{UUID: "MIG-aaaaaaaa-0000-0000-0000-000000000000", GI: 1, CI: 0},
			{UUID: "MIG-bbbbbbbb-0000-0000-0000-000000000000", GI: 2, CI: 0},
		}},
		{Index: 3, UUID: "GPU-88888888-3333-3333-3333-333333333333", Name: "NVIDIA A100-SXM4-40GB"},
	}
}

type visPick struct{ phys, mig int }

func TestResolveVisible(t *testing.T) {
	tests := []struct {
		description   string
		env           []string
		machine       []gpuIdentity // nil: visMachine()
		want          []visPick
		wantUncertain bool
		wantNote      string // substring of one of the notes; "" means no notes
	}{
		{description: "unset, one GPU: that GPU, certain",
			machine: visMachine()[:1], want: []visPick{{0, -1}}},
		{description: "unset, several GPUs: all, narrowed later by PID",
			want: []visPick{{0, -1}, {1, -1}, {2, -1}, {3, -1}}, wantUncertain: true, wantNote: "is not set"},
		{description: "set but empty hides every GPU",
			env: []string{"CUDA_VISIBLE_DEVICES="}, want: nil, wantNote: "hides every GPU"},
		{description: "-1 hides every GPU",
			env: []string{"CUDA_VISIBLE_DEVICES=-1"}, want: nil, wantNote: "hides every GPU"},
		{description: "indices with PCI_BUS_ID order are certain",
			env:  []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=3,1"},
			want: []visPick{{3, -1}, {1, -1}}},
		{description: "indices without PCI_BUS_ID are a guess",
			env: []string{"CUDA_VISIBLE_DEVICES=1"}, want: []visPick{{1, -1}}, wantUncertain: true, wantNote: "CUDA_DEVICE_ORDER is not PCI_BUS_ID"},
		{description: "an index on a one-GPU machine needs no order",
			env: []string{"CUDA_VISIBLE_DEVICES=0"}, machine: visMachine()[:1], want: []visPick{{0, -1}}},
		{description: "full UUID",
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-88888888-3333-3333-3333-333333333333"}, want: []visPick{{3, -1}}},
		{description: "unique UUID prefix, spaces and lower case",
			env: []string{"CUDA_VISIBLE_DEVICES= gpu-7777 , GPU-0a1b2"}, want: []visPick{{2, -1}, {0, -1}}},
		{description: "ambiguous prefix stops the list (CUDA ignores it and what follows)",
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-88888888,GPU-0a1b,GPU-7777"}, want: []visPick{{3, -1}}, wantNote: "ambiguous"},
		{description: "out-of-range index stops the list",
			env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0,7,1"}, want: []visPick{{0, -1}}, wantNote: "out of range"},
		{description: "garbage stops the list",
			env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=1,cuda:2,3"}, want: []visPick{{1, -1}}, wantNote: "neither an index"},
		{description: "MIG UUID (R470+)",
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-bbbbbbbb-0000-0000-0000-000000000000"}, want: []visPick{{2, 1}}},
		{description: "MIG UUID prefix",
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-aaaa"}, want: []visPick{{2, 0}}},
		{description: "pre-R470 MIG form",
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-GPU-77777777-2222-2222-2222-222222222222/2/0"}, want: []visPick{{2, 1}}},
		{description: "pre-R470 MIG form naming a missing instance",
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-GPU-77777777-2222-2222-2222-222222222222/5/0"}, want: nil, wantNote: "does not have"},
		{description: "duplicates counted once",
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-8888,GPU-88888888-3333"}, want: []visPick{{3, -1}}, wantNote: "twice"},
		{description: "the last assignment wins, as in os/exec",
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-8888", "CUDA_VISIBLE_DEVICES=GPU-7777"}, want: []visPick{{2, -1}}},
	}
	for _, tc := range tests {
		t.Run(tc.description, func(t *testing.T) {
			m := tc.machine
			if m == nil {
				m = visMachine()
			}
			v := gpuResolveVisible(tc.env, m)
			var got []visPick
			for i, s := range v.Selected {
				got = append(got, visPick{s.Phys, s.MIG})
				if s.Ordinal != i {
					t.Errorf("selection %d has ordinal %d", i, s.Ordinal)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("selected %v, want %v (notes %q)", got, tc.want, v.Notes)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("selected %v, want %v", got, tc.want)
				}
			}
			if v.Uncertain != tc.wantUncertain {
				t.Errorf("uncertain = %v, want %v", v.Uncertain, tc.wantUncertain)
			}
			joined := strings.Join(v.Notes, " | ")
			if tc.wantNote == "" && len(v.Notes) > 0 {
				t.Errorf("unexpected notes: %s", joined)
			}
			if tc.wantNote != "" && !strings.Contains(joined, tc.wantNote) {
				t.Errorf("notes %q do not mention %q", joined, tc.wantNote)
			}
		})
	}
}
