// Package nb shows agrl's runs and episodes in Jupyter notebooks (GoNB) and in reports:
// training curves as PNG, a trajectory viewer, live progress while a cell trains, and tables.
//
// Every display function has a twin that returns what it would show, so the same views can be
// tested, written to files or embedded in an HTML report:
//
//	Curves / CurvesPNG             metrics of one run over training steps
//	CompareRuns / CompareRunsPNG   metrics of several runs, one line per run (sweeps)
//	Trajectories / TrajectoriesHTML / TrajectoriesText
//	BeforeAfter / BeforeAfterHTML  the same tasks before and after training, side by side
//	EvalTable / EvalTableHTML, BeforeAfterTable, SweepTable
//	NewLive                        a progress bar and small curves updated in place
//
// Only this package talks to the notebook (through GoNB's gonbui); outside a notebook the display
// functions do nothing, and the rendering functions work everywhere.
//
// Each GoNB cell runs as a new process, so a typical notebook trains in one cell (writing a run
// directory) and looks at the results in later cells:
//
//	run := nb.Must(agrl.OpenRun("runs/calc"))
//	nb.Curves(run, agrl.MetricReward, agrl.MetricKL)
//	eps := nb.Must(nb.Latest(run))
//	nb.Trajectories(eps, nb.Failures, 3)
//
// Must turns a (value, error) pair into the value, panicking on the error: the notebook's way
// to stop a cell.
//
// All text that comes from episodes (prompts, actions, observations, errors) is escaped: a
// policy can write anything, including HTML.
package nb
