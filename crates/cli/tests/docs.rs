//! Documentation links: every relative link in README.md and docs/ (its pages and their
//! subfolders) names a file that exists, and an anchor (`page.md#heading`) names a heading
//! of that page. Owns only reading the Markdown; promises a failure that names each broken
//! link with its page; never follows a link off the repository (`http…`, `mailto:`).
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root exists")
}

/// README.md and every `.md` file under docs/, recursively.
fn markdown_pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/ is readable") {
            let path = entry.expect("a docs/ entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

/// The targets of inline links `[text](target)` outside code spans and fenced blocks.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Drop code spans, so `a[i](x)` in code is not read as a link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    targets
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors_of(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    text.lines().filter(|l| l.starts_with('#')).map(|l| heading_anchor(l.trim_start_matches('#'))).collect()
}

/// Why `target`, linked from `page`, does not resolve; None when it does.
fn broken(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (target, None),
    };
    let dest =
        if file.is_empty() { page.to_path_buf() } else { page.parent().expect("a page has a folder").join(file) };
    if !dest.exists() {
        return Some(format!("{}: `{target}`: no such file", page.display()));
    }
    match anchor {
        Some(a) if dest.extension().is_some_and(|e| e == "md") && !anchors_of(&dest).iter().any(|h| h == a) => {
            Some(format!("{}: `{target}`: no heading with that anchor", page.display()))
        }
        _ => None,
    }
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = workspace_root();
    let pages = markdown_pages(&root);
    assert!(pages.iter().any(|p| p.ends_with("docs/ARCHITECTURE.md")), "docs/ARCHITECTURE.md exists");
    let mut bad = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("a page is readable");
        bad.extend(link_targets(&text).iter().filter_map(|t| broken(page, t)));
    }
    assert!(bad.is_empty(), "broken documentation links:\n  {}", bad.join("\n  "));
}

#[test]
fn the_link_reader_finds_links_and_anchors() {
    assert_eq!(link_targets("see [a](x.md) and [b](y.md#z), `[c](code)`"), vec!["x.md", "y.md#z"]);
    assert_eq!(heading_anchor(" I/O scheduling"), "io-scheduling");
    assert_eq!(heading_anchor("Life of a 16 KiB read"), "life-of-a-16-kib-read");
}
