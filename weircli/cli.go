package weircli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/weirhq/weir/client"
)

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func errUsage(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	return &usageError{err}
}

// clientFlags are the flags of every command that talks to a server.
type clientFlags struct {
	url   string
	token string
}

func (cf *clientFlags) register(fs *flag.FlagSet) {
	def := os.Getenv("WEIR_URL")
	if def == "" {
		def = client.DefaultURL
	}
	fs.StringVar(&cf.url, "url", def, "the weir server (default $WEIR_URL, else "+client.DefaultURL+")")
	fs.StringVar(&cf.token, "token", "", "bearer token (default $WEIR_TOKEN)")
}

func (cf *clientFlags) client() (*client.Client, error) {
	tok := cf.token
	if tok == "" {
		tok = os.Getenv("WEIR_TOKEN")
	}
	c, err := client.New(cf.url, &client.Options{Token: tok, UserAgent: "weir-cli"})
	if err != nil {
		return nil, errUsage(err)
	}
	return c, nil
}

// newFlagSet returns a flag set that reports to stderr and prints usage
// (a header, then the flags).
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseInterspersed parses flags that may come before or after the
// positional arguments (weir runs show RUN --json), and returns the
// positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, errUsage(err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// named is a usage text written for weir with the program's name instead.
func named(usage, name string) string {
	return strings.ReplaceAll(usage, "  weir ", "  "+name+" ")
}
