package nb

// This file is the only one that talks to the notebook. Everything else renders to strings
// or bytes, so it can be tested with go test.

import (
	"html"

	"github.com/janpfeifer/gonb/gonbui"
)

// InNotebook reports whether the program runs inside a GoNB cell (display functions are no-ops
// otherwise).
func InNotebook() bool { return gonbui.IsNotebook }

// ShowHTML displays an HTML fragment as the cell's output. It returns once GoNB has the output:
// a display sent just before the cell's program exits is otherwise sometimes lost (seen on a
// loaded machine: the last table of a cell missing from the saved notebook).
func ShowHTML(fragment string) {
	gonbui.DisplayHTML(fragment)
	gonbui.Sync()
}

// ShowPNG displays a PNG image as the cell's output; like ShowHTML it returns once GoNB has it.
func ShowPNG(png []byte) {
	gonbui.DisplayPNG(png)
	gonbui.Sync()
}

// flush returns once GoNB has every output sent so far (see ShowHTML).
func flush() { gonbui.Sync() }

// updateHTML replaces the content of the output block id (created on first use).
func updateHTML(id, fragment string) { gonbui.UpdateHTML(id, fragment) }

// newDisplayID returns a fresh id for an updatable output block.
func newDisplayID() string { return "agrl_nb_" + gonbui.UniqueId() }

// showError displays err in a red box and returns it, so that a display call whose error is
// ignored in a notebook cell still shows what went wrong.
func showError(err error) error {
	if err != nil {
		ShowHTML(errorHTML(err))
	}
	return err
}

func errorHTML(err error) string {
	return `<pre style="color:#b00020;background:#fdecea;padding:6px;border-radius:4px;white-space:pre-wrap">` +
		html.EscapeString(err.Error()) + `</pre>`
}
