package export

import (
	"os/exec"
	"strings"
	"testing"
)

// roundTrip has sh read the script text and print its words, one per NUL.
func roundTrip(t *testing.T, script string) []string {
	t.Helper()
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", script, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

var quoteSeeds = []string{
	"x;echo INJECTED #", "$(echo INJECTED)", "`echo INJECTED`", "a b", "x'y", "''", "'", `"`, `\`,
	"x\necho INJECTED", "*", "~", "#", "-rf", "a=b", "$HOME", "!", "{a,b}", "kw-1", "10.0.0.1/24", "@KWPREFIX@-x",
}

// TestQuote: sh reads quote(s) back as the one word s, whatever s holds.
func TestQuote(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	for _, s := range quoteSeeds {
		got := roundTrip(t, "printf '%s\\0' "+quote(s))
		if len(got) != 1 || got[0] != s {
			t.Errorf("quote(%q) = %s reads back as %q", s, quote(s), got)
		}
	}
	if quote("kw-1") != "kw-1" || quote("10.0.0.1/24") != "10.0.0.1/24" {
		t.Error("safe words are quoted: the script is harder to read for nothing")
	}
}

// FuzzQuote: for any string without NUL (which no argument can hold), sh
// reads quote(s) back as s.
func FuzzQuote(f *testing.F) {
	if _, err := exec.LookPath("sh"); err != nil {
		f.Skip("no sh")
	}
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			return
		}
		got := roundTrip(t, "printf '%s\\0' "+quote(s))
		if len(got) != 1 || got[0] != s {
			t.Fatalf("quote(%q) = %s reads back as %q", s, quote(s), got)
		}
	})
}

// TestCmdQuotesEveryArgument: a hostile value given to cmd stays one word.
func TestCmdQuotesEveryArgument(t *testing.T) {
	g := &gen{}
	g.cmd("printf '%%s\\0' %s %s %d", "x;echo INJECTED", words{"a b", "$(echo INJECTED)"}, 7)
	got := roundTrip(t, g.setup.String())
	want := []string{"x;echo INJECTED", "a b", "$(echo INJECTED)", "7"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestRestoreCommandRefusesTerminator: rules holding the here-document's
// terminator line cannot end it early.
func TestRestoreCommandRefusesTerminator(t *testing.T) {
	if _, err := restoreCommand("ns", "*filter\n"+heredocEnd+"\necho INJECTED\nCOMMIT\n"); err == nil {
		t.Fatal("a terminator line inside the rules is accepted")
	}
	s, err := restoreCommand("ns", "*filter\n-A FORWARD -m comment --comment \"KUBEWALK_EOF\" -j ACCEPT\nCOMMIT\n")
	if err != nil || !strings.HasSuffix(s, "COMMIT\n"+heredocEnd+"\n") {
		t.Fatalf("%q, %v", s, err)
	}
}
