#!/usr/bin/env bash
# The C linker of scripts/release.sh's NVML build (go build -ldflags
# "-linkmode=external -extld=scripts/release-ld.sh"): it links as gcc does,
# so that the binary starts on glibc GPUGUARD_GLIBC (default 2.28, RHEL and
# Rocky 8) although it is built against a newer one. Three things:
#
# - Its own crt1.o (found first through gcc -B): glibc 2.34's crt1.o calls
#   __libc_start_main@GLIBC_2.34 and leaves the program's constructors to it;
#   this one calls __libc_start_main@GLIBC_2.2.5 with an init function that
#   runs them, as crt1.o did before 2.34 (glibc 2.34 and later still take
#   that call, for the binaries built before them).
# - Every glibc symbol the first link binds to a version newer than
#   GPUGUARD_GLIBC is bound again, in copies of the objects, to the newest
#   version not newer than it of the same function: a name (or its __ twin,
#   res_search's __res_search) that libc.so.6 gives at the same address. An
#   alias, so the code is the same on this glibc; there is no such alias for
#   a function that is new (the link then fails and names it).
# - libpthread.so.0, libdl.so.2 and libresolv.so.2 are named as needed: before
#   glibc 2.34 moved them into libc, pthread_create, dlopen and __res_search
#   lived there (on a newer glibc libpthread and libdl are empty stubs, and
#   libresolv is loaded anyway by Go's resolver when it is used).
#
# Go also runs its linker to probe which flags it takes: anything but the
# final link (go.o among the inputs) goes to gcc unchanged.
set -euo pipefail
cc=${GPUGUARD_RELEASE_CC:-gcc}
max=${GPUGUARD_GLIBC:-2.28}

final=""
out=""
prev=""
for a in "$@"; do
  case $a in */go.o) final=1 ;; esac
  [ "$prev" = -o ] && out=$a
  prev=$a
done
if [ -z "$final" ] || [ -z "$out" ]; then exec "$cc" "$@"; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/B"
cat >"$tmp/crt1.c" <<'EOF'
/* _start for a binary that must start on glibc 2.2.5 and later (see
   scripts/release-ld.sh): the x86-64 ABI's process entry, as glibc's own
   crt1.o was before 2.34. */
#include <stddef.h>
typedef void (*initfn)(int, char **, char **);
extern initfn __init_array_start[] __attribute__((visibility("hidden")));
extern initfn __init_array_end[] __attribute__((visibility("hidden")));
extern void _init(void);
/* __libc_start_main calls it before main: the program's constructors. */
__attribute__((used, visibility("hidden"))) void gpuguard_csu_init(int argc, char **argv, char **envp) {
	_init();
	size_t n = (size_t)(__init_array_end - __init_array_start);
	for (size_t i = 0; i < n; i++)
		__init_array_start[i](argc, argv, envp);
}
/* The destructors are the dynamic linker's (.fini_array), as before 2.34. */
__attribute__((used, visibility("hidden"))) void gpuguard_csu_fini(void) {}
const int _IO_stdin_used = 0x20001;
__asm__(
	".symver gpuguard_libc_start_main, __libc_start_main@GLIBC_2.2.5\n"
	/* Sections pushed and popped: the compiler does not know of them. */
	".pushsection .text\n"
	".globl _start\n"
	".type _start, @function\n"
	"_start:\n"
	"	.cfi_startproc\n"
	"	.cfi_undefined rip\n"
	"	xorl %ebp, %ebp\n"
	"	movq %rdx, %r9\n" /* rtld_fini */
	"	popq %rsi\n" /* argc */
	"	movq %rsp, %rdx\n" /* argv */
	"	andq $~15, %rsp\n"
	"	pushq %rax\n"
	"	pushq %rsp\n" /* stack_end */
	"	leaq gpuguard_csu_fini(%rip), %r8\n"
	"	leaq gpuguard_csu_init(%rip), %rcx\n"
	"	movq main@GOTPCREL(%rip), %rdi\n"
	"	call *gpuguard_libc_start_main@GOTPCREL(%rip)\n"
	"	hlt\n"
	"	.cfi_endproc\n"
	".size _start, . - _start\n"
	".popsection\n"
	/* As glibc's crt1.o: the start of the data, for those who look. */
	".pushsection .data\n"
	".globl __data_start\n"
	"__data_start:\n"
	"	.long 0\n"
	".weak data_start\n"
	"	data_start = __data_start\n"
	".popsection\n");
EOF
"$cc" -O2 -fPIC -fno-stack-protector -c "$tmp/crt1.c" -o "$tmp/B/crt1.o"
cp "$tmp/B/crt1.o" "$tmp/B/Scrt1.o"
extra=(-B"$tmp/B/" -Wl,--no-as-needed -l:libpthread.so.0 -l:libdl.so.2 -l:libresolv.so.2)

# newer FILE: its undefined symbols bound to a glibc newer than max, as
# "name version" lines.
newer() {
  objdump -T "$1" | tr -d '()' | awk -v max="$max" '
    function key(v,  p) { split(v, p, "."); return p[1] * 1000000 + p[2] * 1000 + p[3] }
    NF >= 2 && /\*UND\*/ && $(NF-1) ~ /^GLIBC_[0-9]/ {
      v = substr($(NF-1), 7)
      if (key(v) > key(max)) print $NF, $(NF-1)
    }'
}

"$cc" "$@" "${extra[@]}"
late=$(newer "$out")
[ -z "$late" ] && exit 0

libc=$("$cc" -print-file-name=libc.so.6)
if [ ! -f "$libc" ]; then
  echo "release-ld: cannot find libc.so.6 ($cc -print-file-name=libc.so.6 says $libc): install libc6-dev" >&2
  exit 1
fi
# The old binding of each late symbol, as objcopy --redefine-syms lines.
printf '%s\n' "$late" >"$tmp/late"
objdump -T "$libc" | tr -d '()' | awk -v max="$max" -v libc="$libc" '
  function key(v,  p) { split(v, p, "."); return p[1] * 1000000 + p[2] * 1000 + p[3] }
  FNR == NR { want[$1] = $2; next }
  NF >= 2 && $(NF-1) ~ /^GLIBC_[0-9]/ && $0 !~ /\*UND\*/ { addr[$NF, $(NF-1)] = $1; row[++rows] = $1 " " $NF " " $(NF-1) }
  END {
    bad = 0
    for (s in want) {
      a = addr[s, want[s]]; best = ""; bestv = ""
      for (r = 1; r <= rows; r++) {
        split(row[r], f, " ")
        if (f[1] != a || (f[2] != s && f[2] != "__" s)) continue
        v = substr(f[3], 7)
        if (key(v) > key(max)) continue
        # The newest such version; the same name before its __ twin.
        if (bestv == "" || key(v) > key(bestv) || (key(v) == key(bestv) && f[2] == s)) { best = f[2] "@" f[3]; bestv = v }
      }
      if (a == "" || best == "") { print "release-ld: " s "@" want[s] " has no older version in " libc " that glibc " max " has (a function newer than that): the release cannot use it" > "/dev/stderr"; bad = 1; continue }
      print s, best
    }
    exit bad
  }' "$tmp/late" - >"$tmp/rebind" || exit 1

args=()
i=0
for a in "$@"; do
  if [[ $a == *.o ]] && [ -f "$a" ]; then
    i=$((i + 1))
    objcopy --redefine-syms="$tmp/rebind" "$a" "$tmp/in$i.o"
    a="$tmp/in$i.o"
  fi
  args+=("$a")
done
"$cc" "${args[@]}" "${extra[@]}"
late=$(newer "$out")
if [ -n "$late" ]; then
  echo "release-ld: $out still needs a glibc newer than $max for:" $late "(from a library or start file, not gpuguard's objects): build on an older distribution" >&2
  exit 1
fi
