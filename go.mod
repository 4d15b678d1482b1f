module agrl.dev

go 1.26
