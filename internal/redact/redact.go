// Package redact hides secrets in the command lines gpuguard writes or
// sends (events.jsonl, state.json, gpuguard.log, memo.json, the metrics
// files, notifications, its own status lines), so that a token given on the
// command line never lands in a file or a chat. The job's own argv, what is
// executed, is never changed: only what gpuguard records about it.
//
// One rule, read from the structure of a command line (docs/secrets.md):
//
//   - the value of a flag whose name says it holds a secret: --api-key=V,
//     --token V, --hf_token V, --password=V (the name's words, see
//     SecretName);
//   - the credentials of a URL, also inside a larger word:
//     https://user:pass@host → https://user:***@host, https://tok@host →
//     https://***@host;
//   - the value of a KEY=VALUE word whose key says it holds a secret:
//     HF_TOKEN=V, WANDB_API_KEY=V, +db.password=V (Hydra).
//
// Text applies the same rule to a line of free text (a status line, an
// error, a shell command such as --notify-command's), where it also hides
// what follows "Bearer" and a header such as "Authorization:".
//
// The package is pure: no I/O, no processes. GPUGUARD_REDACT=off in
// gpuguard's environment turns redaction off (read once, at start).
package redact

import (
	"os"
	"strings"
	"unicode"
)

// Mask replaces each secret.
const Mask = "***"

// EnvOff is the environment variable that turns redaction off: its value
// "off" does.
const EnvOff = "GPUGUARD_REDACT"

// off: redaction is turned off (GPUGUARD_REDACT=off).
var off = os.Getenv(EnvOff) == "off"

// Enabled reports whether secrets are redacted (GPUGUARD_REDACT is not
// "off").
func Enabled() bool { return !off }

// Argv returns a copy of argv as gpuguard may record it: each word with its
// secrets masked, and the word after a secret flag given in two words
// (--token V) masked whole. A word holding spaces (a shell script given to
// sh -c) is read as free text (Text). nil stays nil.
func Argv(argv []string) []string {
	if argv == nil {
		return nil
	}
	out := make([]string, len(argv))
	copy(out, argv)
	if off {
		return out
	}
	for i := 0; i < len(out); i++ {
		w := out[i]
		if strings.ContainsFunc(w, unicode.IsSpace) {
			out[i] = Text(w)
			continue
		}
		out[i] = word(w)
		if takesValue(w) && i+1 < len(out) && isValue(out[i+1]) {
			i++
			out[i] = Mask
		}
	}
	return out
}

// Word returns one word with its secrets masked: a secret flag's value
// (--api-key=V), a secret KEY=VALUE's value, URL credentials.
func Word(w string) string {
	if off {
		return w
	}
	return word(w)
}

func word(w string) string {
	if name, value, ok := strings.Cut(w, "="); ok && value != "" && value != Mask {
		switch {
		case strings.HasPrefix(name, "-") && SecretName(name):
			return name + "=" + Mask
		case isKey(name) && SecretName(name):
			return name + "=" + Mask
		}
	}
	return urls(w)
}

// takesValue reports whether w is a secret flag given without its value
// (--token, then the value as the next word). A flag whose name begins with
// a switch's verb (--no-auth, --use-auth-token, --enable-auth) is taken
// for a switch: the word after it is an argument of its own.
func takesValue(w string) bool {
	if !strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
		return false
	}
	name := strings.TrimLeft(w, "-")
	if len(name) < 2 || !SecretName(name) {
		return false
	}
	return !switchVerbs[nameWords(name)[0]]
}

// isValue: the word after a secret flag is its value unless it is another
// flag (or empty, or already masked).
func isValue(w string) bool {
	return w != "" && w != Mask && !strings.HasPrefix(w, "-")
}

// isKey: name is the key of a KEY=VALUE word: an environment variable or a
// dotted config key (Hydra's +key and ~key prefixes allowed).
func isKey(name string) bool {
	name = strings.TrimLeft(name, "+~")
	if name == "" || !(name[0] == '_' || isLetter(name[0])) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c == '.' || c == '-' || isLetter(c) || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// The words of a name that make it a secret's. A name's last word decides
// (its head noun): --api-key and --hf_token hold secrets, --token-file and
// --auth-timeout hold a path and a duration, --secret-sauce is sauce.
var (
	// secretWords are secrets as a name's last word.
	secretWords = set("token", "secret", "secrets", "password", "passwords", "passwd", "passphrase",
		"pass", "credential", "credentials", "creds", "apikey", "apikeys", "auth", "authorization",
		"cookie", "privatekey", "secretkey", "accesskey", "sessionkey")
	// secretSuffixes are secrets at the end of a last word written as one
	// (PGPASSWORD, HFTOKEN, --authtoken).
	secretSuffixes = []string{"token", "password", "passwd", "secret", "apikey"}
	// keyQualifiers make "key" (or "keys") a secret: --api-key,
	// AWS_SECRET_ACCESS_KEY, --private-key. A key alone is a dictionary's or
	// a cache's.
	keyQualifiers = set("api", "private", "secret", "access", "auth", "encryption", "signing", "ssh",
		"client", "master", "license", "account", "storage", "subscription", "service", "session",
		"deploy", "app", "consumer", "shared", "sas")
	// textTokens make "token" a piece of text or a count, not a
	// credential: --max-token, --pad-token '<pad>', --eos_token.
	textTokens = set("max", "min", "num", "n", "number", "total", "count", "per", "bos", "eos", "pad",
		"unk", "sep", "cls", "mask", "special", "start", "end", "stop", "begin", "new", "image", "eot",
		"first", "last", "next")
	// switchVerbs begin the names of on/off switches.
	switchVerbs = set("no", "use", "enable", "disable", "with", "without", "require", "skip", "allow")
)

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// SecretName reports whether a flag's or a key's name says that its value
// is a secret: its last word (split at - _ . and camelCase; leading dashes,
// + and ~ ignored) is token, secret, password, passwd, passphrase, pass,
// credential(s), creds, apikey, auth, authorization or cookie; or ends in
// token, password, passwd, secret or apikey (PGPASSWORD); or is key(s)
// after api, private, secret, access, ssh, client... (--api-key,
// AWS_SECRET_ACCESS_KEY). "token" after a word that makes it text or a
// count (max, num, pad, eos, bos, special...) is not a secret, nor is
// "tokens": --max-tokens, --pad-token, --num_tokens.
func SecretName(name string) bool {
	words := nameWords(name)
	if len(words) == 0 {
		return false
	}
	last, prev := words[len(words)-1], ""
	if len(words) > 1 {
		prev = words[len(words)-2]
	}
	switch {
	case last == "token" && textTokens[prev]:
		return false
	case secretWords[last]:
		return true
	case (last == "key" || last == "keys") && keyQualifiers[prev]:
		return true
	}
	for _, s := range secretSuffixes {
		if strings.HasSuffix(last, s) && !strings.HasSuffix(last, "tokens") {
			return true
		}
	}
	return false
}

// nameWords splits a name into lower-case words at anything not a letter or
// a digit and at camelCase boundaries (apiKey, APIKey, HFToken).
func nameWords(name string) []string {
	var words []string
	var cur []rune
	rs := []rune(name)
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush()
			continue
		}
		if unicode.IsUpper(r) && len(cur) > 0 {
			prevLower := unicode.IsLower(cur[len(cur)-1]) || unicode.IsDigit(cur[len(cur)-1])
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if prevLower || (unicode.IsUpper(cur[len(cur)-1]) && nextLower) {
				flush()
			}
		}
		cur = append(cur, r)
	}
	flush()
	return words
}

// urls masks the credentials of each URL in s: the password of
// scheme://user:pass@host, or the whole user part when there is no
// password (a token given as the user, as GitHub takes it).
func urls(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		// A scheme: letters, then letters, digits, + . - (git+https).
		j := i
		for j > 0 && isSchemeChar(s[j-1]) {
			j--
		}
		for j < i && !isLetter(s[j]) {
			j++
		}
		start := i + 3
		b.WriteString(s[:start])
		s = s[start:]
		if j == i {
			continue
		}
		end := strings.IndexFunc(s, func(r rune) bool {
			return r == '/' || r == '?' || r == '#' || unicode.IsSpace(r) || strings.ContainsRune(`"'<>`+"`", r)
		})
		if end < 0 {
			end = len(s)
		}
		at := strings.LastIndexByte(s[:end], '@')
		if at <= 0 {
			continue
		}
		user := s[:at]
		switch u, pass, ok := strings.Cut(user, ":"); {
		case ok && pass != "" && pass != Mask:
			b.WriteString(u + ":" + Mask)
		case !ok && user != Mask:
			b.WriteString(Mask)
		default:
			b.WriteString(user)
		}
		s = s[at:]
	}
}

func isSchemeChar(c byte) bool {
	return isLetter(c) || c >= '0' && c <= '9' || c == '+' || c == '.' || c == '-'
}

// authSchemes are the words of an Authorization header that come before the
// credentials.
var authSchemes = set("bearer", "basic", "token", "digest", "negotiate", "bot")

// Text returns a line of free text (a status line, an error, a shell
// command) with its secrets masked: each word as Word masks it (quotes and
// brackets around it kept), the word after a secret flag (--token V), the
// word after "Bearer" and after a header that names a secret
// ("Authorization: Bearer V", "X-Api-Key: V"). Spacing is kept.
func Text(s string) string {
	if off || s == "" {
		return s
	}
	var b strings.Builder
	maskNext, scheme := false, false
	for len(s) > 0 {
		sp := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsSpace(r) })
		if sp < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:sp])
		s = s[sp:]
		n := strings.IndexFunc(s, unicode.IsSpace)
		if n < 0 {
			n = len(s)
		}
		w := s[:n]
		s = s[n:]
		lead := len(w) - len(strings.TrimLeft(w, `'"([{<`))
		core := strings.TrimLeft(w, `'"([{<`)
		core = strings.TrimRight(core, `'",;)]}>`)
		pre, post := w[:lead], w[lead+len(core):]
		lower := strings.ToLower(core)
		switch {
		case core == "":
		case scheme && authSchemes[lower] && !strings.HasSuffix(core, ":"):
			// "Authorization: Bearer V": the scheme stays, V is masked.
			maskNext, scheme = true, false
			b.WriteString(w)
			continue
		case maskNext && isValue(core):
			b.WriteString(pre + Mask + post)
			maskNext, scheme = false, false
			continue
		}
		maskNext, scheme = false, false
		switch {
		case lower == "bearer":
			maskNext = true
		case strings.HasSuffix(core, ":") && len(core) > 1 && SecretName(strings.TrimSuffix(core, ":")):
			maskNext, scheme = true, true
		case takesValue(core):
			maskNext = true
		}
		b.WriteString(pre + word(core) + post)
	}
	return b.String()
}
