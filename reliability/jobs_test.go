package reliability

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// runJob is the test binary as one of this package's jobs:
//
//	chatty SEED         write Chatty(SEED) to stdout and stderr, piece by piece
//	script FILE         act as the attempt's line of FILE says (see scriptStep)
//
// It returns the exit status.
func runJob(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "reliability job: no mode")
		return 2
	}
	switch args[0] {
	case "chatty":
		seed, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "reliability job chatty: bad seed:", err)
			return 2
		}
		for _, p := range Chatty(seed) {
			w := os.Stdout
			if p.stream == 2 {
				w = os.Stderr
			}
			if _, err := w.WriteString(p.text); err != nil {
				return 3
			}
		}
		return 0
	case "script":
		return scriptStep(args[1:])
	}
	fmt.Fprintf(os.Stderr, "reliability job: unknown mode %q\n", args[0])
	return 2
}

// piece is one write of a chatty job.
type piece struct {
	stream int // 1 stdout, 2 stderr
	text   string
}

// Chatty returns the writes of the chatty job with this seed: 40 to 200
// writes of plain lines, tqdm-style '\r' redraws, ANSI colour, UTF-8, long
// lines (up to 12 KiB), empty lines, lines split across writes, and on both
// streams a last line without a newline. It never writes "\r\n", so that
// output that went through a pty (which turns "\n" into "\r\n") compares
// equal after CRLF normalisation.
func Chatty(seed uint64) []piece {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	n := 40 + r.IntN(160)
	var out []piece
	for i := 0; i < n; i++ {
		stream := 1
		if r.IntN(4) == 0 {
			stream = 2
		}
		var b strings.Builder
		switch r.IntN(8) {
		case 0: // progress bar redraws, then a newline
			total := 1 + r.IntN(20)
			for k := 0; k <= total; k++ {
				fmt.Fprintf(&b, "\r%3d%%|%-10s| %d/%d [00:0%d<00:00, %d.%02dit/s]", k*100/total, strings.Repeat("#", k*10/total), k, total, k%10, r.IntN(99), r.IntN(99))
			}
			b.WriteByte('\n')
		case 1: // colour
			fmt.Fprintf(&b, "\x1b[3%dmINFO\x1b[0m step %d loss=%.4f\n", r.IntN(8), i, r.Float64())
		case 2: // a long line
			b.WriteString(strings.Repeat("abcdefghij", 1+r.IntN(1200)))
			b.WriteByte('\n')
		case 3: // empty lines
			b.WriteString(strings.Repeat("\n", 1+r.IntN(3)))
		case 4: // half a line: the next write on this stream completes it
			fmt.Fprintf(&b, "partial %d ... ", i)
		case 5: // UTF-8 and tabs
			fmt.Fprintf(&b, "Époque %d\tперплексия=%d\t損失 ✓\n", i, r.IntN(1000))
		default:
			fmt.Fprintf(&b, "Epoch %d/%d step %d: lr=%g\n", i/10, n/10, i, r.Float64()/100)
		}
		out = append(out, piece{stream, b.String()})
	}
	out = append(out,
		piece{1, fmt.Sprintf("last stdout line without newline %d", seed)},
		piece{2, fmt.Sprintf("last stderr line without newline %d", seed)})
	return out
}

// chattyStreams returns what Chatty(seed) writes to stdout, to stderr, and
// to both in order.
func chattyStreams(seed uint64) (stdout, stderr, both string) {
	var o, e, c strings.Builder
	for _, p := range Chatty(seed) {
		if p.stream == 1 {
			o.WriteString(p.text)
		} else {
			e.WriteString(p.text)
		}
		c.WriteString(p.text)
	}
	return o.String(), e.String(), c.String()
}

// scriptStep is the job of the fault tests. With argument DIR it reads
// DIR/plan, whose line N (from 1) says what attempt N does, word by word:
//
//	args         write the attempt's argv and VAL_CROP_SIZE to DIR/args-N
//	ready        create DIR/ready-N
//	wait         open the FIFO DIR/go and read it to end of file (the test
//	             writes it when it has done what the job must outlive)
//	ckpt STEP    write DIR/ckpt/step_STEP.ckpt
//	print K      print K lines on stdout
//	oom          print PyTorch's CUDA out-of-memory error on stderr
//	exit N       exit with status N (the default is 0)
//
// The remaining words of the argv (flags the policy added) are ignored.
func scriptStep(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "reliability job script: no directory")
		return 2
	}
	dir := args[0]
	// The attempt number: how many attempts ran before, counted in
	// DIR/count (attempts never overlap), so that the job does not depend
	// on GPUGUARD_ATTEMPT, which TestJobSeesItsAttemptNumber checks.
	prev, _ := os.ReadFile(dir + "/count")
	n := len(prev) + 1
	if err := os.WriteFile(dir+"/count", append(prev, '.'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "reliability job script:", err)
		return 2
	}
	plan, err := os.ReadFile(dir + "/plan")
	if err != nil {
		fmt.Fprintln(os.Stderr, "reliability job script:", err)
		return 2
	}
	planLines := strings.Split(strings.TrimSpace(string(plan)), "\n")
	if n > len(planLines) {
		fmt.Fprintf(os.Stderr, "reliability job script: attempt %d has no line in the plan\n", n)
		return 2
	}
	words := strings.Fields(planLines[n-1])
	next := func(i int) string {
		if i+1 < len(words) {
			return words[i+1]
		}
		return ""
	}
	for i := 0; i < len(words); i++ {
		switch words[i] {
		case "args":
			content := strings.Join(os.Args, "\x00") + "\nVAL_CROP_SIZE=" + os.Getenv("VAL_CROP_SIZE") + "\n"
			atomicWrite(fmt.Sprintf("%s/args-%d", dir, n), content)
		case "ready":
			atomicWrite(fmt.Sprintf("%s/ready-%d", dir, n), "ready\n")
		case "wait":
			f, err := os.Open(dir + "/go")
			if err != nil {
				fmt.Fprintln(os.Stderr, "reliability job script:", err)
				return 2
			}
			var b [64]byte
			for {
				if _, err := f.Read(b[:]); err != nil {
					break
				}
			}
			f.Close()
		case "ckpt":
			i++
			os.MkdirAll(dir+"/ckpt", 0o755)
			atomicWrite(fmt.Sprintf("%s/ckpt/step_%s.ckpt", dir, words[i]), "weights\n")
		case "print":
			i++
			k, _ := strconv.Atoi(words[i])
			var b strings.Builder
			for j := 1; j <= k; j++ {
				fmt.Fprintf(&b, "attempt %d line %d\n", n, j)
			}
			os.Stdout.WriteString(b.String())
		case "oom":
			// The request shrinks from attempt to attempt, as it does when
			// a relaunch halves the batch (the same request would tell the
			// policy that the batch is not the cause).
			os.Stderr.WriteString("Traceback (most recent call last):\n" +
				"  File \"train.py\", line 10, in <module>\n" +
				fmt.Sprintf("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of 16.00 GiB of which 1.00 GiB is free. ", 2/float64(n)) +
				"Including non-PyTorch memory, this process has 15.00 GiB memory in use. Of the allocated memory 14.50 GiB is allocated by PyTorch, " +
				"and 100.00 MiB is reserved by PyTorch but unallocated.\n")
		case "exit":
			code, _ := strconv.Atoi(next(i))
			return code
		default:
			fmt.Fprintf(os.Stderr, "reliability job script: unknown word %q\n", words[i])
			return 2
		}
	}
	return 0
}

// atomicWrite writes content to file by renaming a temporary file into
// place: a reader never sees half of it.
func atomicWrite(file, content string) {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err == nil {
		os.Rename(tmp, file)
	}
}
