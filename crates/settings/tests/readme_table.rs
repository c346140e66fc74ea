//! The README's environment-variable table lists exactly the variables of
//! [`spin_shim_settings::VARS`], with the same roles and defaults.

use spin_shim_settings::{Var, VARS};

/// The heading of the README section that holds the table.
const HEADING: &str = "## Environment variables";

/// The table row the README should have for `v`.
fn row(v: &Var) -> String {
    let roles: Vec<&str> = v.roles.iter().map(|r| r.name()).collect();
    format!(
        "| `{}` | {} | {} | {} |",
        v.name,
        roles.join(", "),
        v.default,
        v.values
    )
}

/// The cells of a table row.
fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn the_readme_table_lists_every_variable_with_its_roles_and_default() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let section = readme
        .split_once(&format!("\n{HEADING}\n"))
        .unwrap_or_else(|| panic!("README.md has no `{HEADING}` section"))
        .1;
    let section = section.split("\n## ").next().unwrap();
    let rows: Vec<Vec<String>> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(cells)
        .collect();
    let expected: String = VARS.iter().map(|v| row(v) + "\n").collect();
    let hint = format!("the table rows from the settings modules:\n{expected}");
    let names: Vec<&str> = rows.iter().map(|r| r[0].trim_matches('`')).collect();
    let known: Vec<&str> = VARS.iter().map(|v| v.name).collect();
    for n in &names {
        assert!(
            known.contains(n),
            "README lists `{n}`, which no settings module reads\n{hint}"
        );
    }
    for v in VARS {
        let Some(r) = rows.iter().find(|r| r[0].trim_matches('`') == v.name) else {
            panic!("README's table lacks `{}`\n{hint}", v.name);
        };
        assert_eq!(
            cells(&row(v))[1..3],
            r[1..3],
            "roles and default of `{}`\n{hint}",
            v.name
        );
    }
    assert_eq!(
        names.len(),
        VARS.len(),
        "a variable is listed twice\n{hint}"
    );
}
