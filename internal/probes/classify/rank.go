package classify

// Line prefixes and ranks.
//
// Launchers put the rank in front of each line a worker prints:
//
//	[rank3]: Traceback ...                torch.distributed (TORCH_... log prefix)
//	[default3]: Traceback ...             torchrun --tee / --log-line-prefix-template default;
//	                                      the number is the worker's local rank
//	3: Traceback ...                      srun --label (the task id, the rank under srun)
//	[1,3]<stderr>: ...                    Open MPI --tag-output
//	[1,mpirank:3,algo-1]<stdout>: ...     SageMaker's MPI wrapper
//
// and pastes of logs add their own: a markdown quote "> ", backticks, a CI
// runner's ISO timestamp. splitPrefixes removes these, in any combination, and
// keeps the rank. Prefixes that carry no rank and that detectors handle by
// searching inside the line (glog "E0602 ...] ", "[INFO|trainer.py:2369] ...
// >> ", mmengine "05/27 11:03:44 - mmengine - INFO - ") are left in place.

// splitPrefixes returns the rank named by t's prefixes (-1 when none) and the
// rest of t after them. It never allocates.
func splitPrefixes(t []byte) (rank int, rest []byte) {
	rank = -1
	for iter := 0; iter < 8 && len(t) > 0; iter++ {
		switch c := t[0]; {
		case c == '>':
			// A markdown quote: "> " or a bare ">".
			if len(t) > 1 && t[1] != ' ' {
				return rank, t
			}
			t = t[1:]
			if len(t) > 0 && t[0] == ' ' {
				t = t[1:]
			}
			continue
		case c == '`':
			for len(t) > 0 && t[0] == '`' {
				t = t[1:]
			}
			continue
		case c == '[':
			if r, n := bracketRank(t); n > 0 {
				rank, t = r, t[n:]
				if len(t) > 0 && t[0] == ' ' {
					t = t[1:]
				}
				continue
			}
		case c == ' ' || asciiDigit(c):
			if r, n := srunLabel(t); n > 0 {
				rank, t = r, t[n:]
				continue
			}
			if n := isoTimestamp(t); n > 0 {
				t = t[n:]
				continue
			}
		}
		break
	}
	return rank, t
}

// bracketRank reads "[rankN]:", "[<role>N]:" (torchrun), "[J,N]<stdout>:" or
// "[J,mpirank:N,host]<stderr>:" (MPI) at the start of t. It returns the rank
// and the prefix length, or n == 0.
func bracketRank(t []byte) (rank int, n int) {
	i := 1
	// "[rankN]:" and "[defaultN]:": letters, then digits, then "]:".
	for i < len(t) && i < 40 && (asciiLetter(t[i]) || t[i] == '_') {
		i++
	}
	if i > 1 {
		v, dn, ok := scanInt(t[i:])
		if !ok || t[i] == '-' || t[i] == '+' {
			return 0, 0
		}
		i += dn
		if i+1 < len(t) && t[i] == ']' && t[i+1] == ':' {
			return int(v), i + 2
		}
		return 0, 0
	}
	// MPI: "[1,3]<stdout>:" or "[1,mpirank:3,algo-1]<stdout>:".
	_, dn, ok := scanInt(t[i:])
	if !ok || !asciiDigit(t[i]) {
		return 0, 0
	}
	i += dn
	if i >= len(t) || t[i] != ',' {
		return 0, 0
	}
	i++
	if bHasPrefix(t[i:], "mpirank:") {
		i += len("mpirank:")
	}
	if i >= len(t) || !asciiDigit(t[i]) {
		return 0, 0
	}
	v, dn, _ := scanInt(t[i:])
	i += dn
	for i < len(t) && i < 100 && t[i] != ']' {
		i++
	}
	if i >= len(t) || t[i] != ']' {
		return 0, 0
	}
	i++
	for _, tag := range [...]string{"<stdout>:", "<stderr>:"} {
		if bHasPrefix(t[i:], tag) {
			return int(v), i + len(tag)
		}
	}
	return 0, 0
}

// srunLabel reads srun --label's "N: " (right-aligned with spaces when there
// are ten tasks or more).
func srunLabel(t []byte) (rank int, n int) {
	i := 0
	for i < len(t) && i < 6 && t[i] == ' ' {
		i++
	}
	if i >= len(t) || !asciiDigit(t[i]) {
		return 0, 0
	}
	v, dn, _ := scanInt(t[i:])
	if dn > 6 {
		return 0, 0
	}
	i += dn
	if i+1 < len(t) && t[i] == ':' && t[i+1] == ' ' {
		return int(v), i + 2
	}
	return 0, 0
}

// isoTimestamp reads a CI runner's "2025-10-03T17:21:09.8812345Z " prefix.
func isoTimestamp(t []byte) int {
	if len(t) < 20 || t[4] != '-' || t[7] != '-' || t[10] != 'T' || !asciiDigit(t[0]) || !asciiDigit(t[11]) {
		return 0
	}
	for i := 11; i < len(t) && i < 40; i++ {
		if t[i] == ' ' {
			return i + 1
		}
	}
	return 0
}

// rankInText finds a "[Rank N]" or "[rank N]" tag inside a message, as the
// NCCL watchdog and some loggers print it. It returns -1 when there is none.
func rankInText(t []byte) int {
	for off := 0; off < len(t); {
		i := indexFoldASCII(t[off:], "[rank")
		if i < 0 {
			return -1
		}
		j := off + i + len("[rank")
		if j < len(t) && t[j] == ' ' {
			j++
		}
		if v, n, ok := scanInt(t[j:]); ok && j < len(t) && asciiDigit(t[j]) && j+n < len(t) && t[j+n] == ']' {
			return int(v)
		}
		off = j
	}
	return -1
}
