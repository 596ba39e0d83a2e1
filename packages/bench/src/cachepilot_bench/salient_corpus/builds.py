"""Build systems and package managers: make, cargo, npm, webpack, tsc, eslint, docker build,
pip, mvn, gradle."""

# Templates of tool output lines read best whole, as the tools print them.
# ruff: noqa: E501

from __future__ import annotations

import random

from cachepilot_bench.salient_corpus.doc import Doc, Sample, ident, path, progress_bar

__all__ = [
    "cargo",
    "docker_build",
    "eslint",
    "gradle",
    "make",
    "mvn",
    "npm_install",
    "pip_install",
    "tsc",
    "webpack",
]


def make(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    doc.add("make -C src all")
    doc.add("make[1]: Entering directory '/home/ci/build/src'")

    def unit(d: Doc) -> None:
        src = path(rng, rng.choice(("c", "cc", "cpp")), depth=rng.randint(1, 3))
        obj = src.rsplit(".", 1)[0].replace("src/", "obj/") + ".o"
        flags = " ".join(
            rng.sample(
                [
                    "-O2",
                    "-g",
                    "-Wall",
                    "-Wextra",
                    "-fPIC",
                    "-pthread",
                    "-DNDEBUG",
                    "-Iinclude",
                    "-I../vendor/zlib",
                ],
                5,
            )
        )
        d.add(f"gcc {flags} -c {src} -o {obj}")
        if rng.random() < 0.08:
            d.add(
                f"{src}:{rng.randint(10, 900)}:{rng.randint(1, 40)}: warning: unused variable "
                f"'{ident(rng)}' [-Wunused-variable]"
            )
            d.add(f"  {rng.randint(10, 900)} |     int {ident(rng)} = 0;")
        if rng.random() < 0.03:
            d.add(f"ar rcs lib/lib{rng.choice(('net', 'core', 'util'))}.a obj/*.o")

    doc.fill(target, unit)
    bad = path(rng, "c", depth=2)
    line = rng.randint(40, 700)
    var = ident(rng)
    doc.insert_at(
        share,
        [
            (f"gcc -O2 -g -Wall -Iinclude -c {bad} -o obj/{bad[4:-2]}.o", False),
            (f"{bad}: In function '{ident(rng)}':", False),
            (f"{bad}:{line}:17: error: '{var}' undeclared (first use in this function)", True),
            (f"  {line} |     return {var};", False),
            (f"      |            ^{'~' * len(var)}", False),
        ],
    )
    doc.add("make[1]: Leaving directory '/home/ci/build/src'")
    doc.add("make: *** [Makefile:41: all] Error 2", mark=True)
    return doc.sample("make", "bash", {"command": "make -C src all"}, share)


def cargo(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    doc.add("    Updating crates.io index")

    def crate(d: Doc) -> None:
        name = ident(rng, 2, "-")
        version = f"{rng.randint(0, 3)}.{rng.randint(0, 40)}.{rng.randint(0, 20)}"
        verb = rng.choice(("Compiling", "Compiling", "Compiling", "Downloaded", "Checking"))
        d.add(f"{verb:>12} {name} v{version}")
        if rng.random() < 0.05:
            d.add(f"warning: unused import: `{ident(rng)}::{ident(rng, 1)}`")
            d.add(f"  --> {path(rng, 'rs')}:{rng.randint(1, 80)}:{rng.randint(5, 30)}")
            d.add("   |")
            d.add("   = note: `#[warn(unused_imports)]` on by default")
            d.add("")
        if rng.random() < 0.04:
            d.add(
                f"    Building [{'=' * rng.randint(5, 50):<57}] {rng.randint(10, 400)}/412: "
                f"{ident(rng, 2, '-')}"
            )

    doc.fill(target, crate)
    src = path(rng, "rs")
    line = rng.randint(20, 400)
    doc.insert_at(
        share,
        [
            ("error[E0308]: mismatched types", True),
            (f"  --> {src}:{line}:24", True),
            ("   |", False),
            (f"{line:<3}|     let count: u32 = {ident(rng)}.len();", False),
            (
                "   |                ---   ^^^^^^^^^^^^^^^^^^^^^^ expected `u32`, found `usize`",
                False,
            ),
            ("   |                |", False),
            ("   |                expected due to this", False),
            ("", False),
        ],
    )
    doc.add("For more information about this error, try `rustc --explain E0308`.")
    doc.add(
        f"error: could not compile `{ident(rng, 2, '-')}` (lib) due to 1 previous error", mark=True
    )
    return doc.sample("cargo", "bash", {"command": "cargo build --release"}, share)


def npm_install(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)

    def package(d: Doc) -> None:
        name = ident(rng, rng.randint(1, 2), "-")
        r = rng.random()
        if r < 0.55:
            d.add(
                f"npm http fetch GET 200 https://registry.npmjs.org/{name} {rng.randint(3, 900)}ms"
                f" (cache {rng.choice(('hit', 'miss', 'revalidated'))})"
            )
        elif r < 0.8:
            d.add(f"npm timing reifyNode:node_modules/{name} Completed in {rng.randint(1, 3000)}ms")
        elif r < 0.93:
            d.add(
                f"npm WARN deprecated {name}@{rng.randint(0, 9)}.{rng.randint(0, 9)}.0: This "
                f"package is no longer supported. Use {ident(rng, 1)}-{ident(rng, 1)} instead."
            )
        else:
            d.add(progress_bar(rng, f"reify:{name}", steps=rng.randint(4, 10), width=18))

    doc.fill(target, package)
    pkg = ident(rng, 2, "-")
    doc.insert_at(
        share,
        [
            ("npm ERR! code ERESOLVE", True),
            ("npm ERR! ERESOLVE unable to resolve dependency tree", True),
            ("npm ERR!", False),
            (f"npm ERR! While resolving: {pkg}@1.4.0", False),
            ("npm ERR! Found: react@18.2.0", True),
            (
                f'npm ERR! Could not resolve dependency: peer react@"^17.0.0" from {ident(rng, 2, "-")}'
                f"@3.1.2",
                True,
            ),
        ],
    )
    doc.add(
        "npm ERR! A complete log of this run can be found in: "
        "/home/ci/.npm/_logs/2024-05-02T10_11_12_345Z-debug-0.log"
    )
    return doc.sample("npm", "bash", {"command": "npm install"}, share)


def webpack(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    doc.add("> app@2.3.0 build")
    doc.add("> webpack --mode production --progress")

    def module(d: Doc) -> None:
        r = rng.random()
        src = path(rng, rng.choice(("js", "jsx", "ts", "tsx", "css")))
        if r < 0.6:
            d.add(
                f"  ./{src} {rng.randint(1, 90)}.{rng.randint(0, 9)} KiB [built] [code generated]"
            )
        elif r < 0.8:
            d.add(
                f"modules by path ./{src.rsplit('/', 1)[0]}/ {rng.randint(10, 900)} KiB "
                f"{rng.randint(2, 80)} modules"
            )
        elif r < 0.9:
            d.add(progress_bar(rng, f"{rng.randint(10, 95)}% building", steps=6, width=20))
        else:
            d.add(
                f"asset {ident(rng, 1)}.{rng.randbytes(4).hex()}.js {rng.randint(1, 700)} KiB "
                "[emitted] [minimized] (name: main)"
            )

    doc.fill(target, module)
    src = path(rng, "tsx", root="./src")
    doc.insert_at(
        share,
        [
            (f"ERROR in {src} {rng.randint(3, 200)}:{rng.randint(1, 30)}", True),
            (
                f"Module not found: Error: Can't resolve './{ident(rng)}' in '/app/src/components'",
                True,
            ),
            (" @ ./src/index.tsx 7:0-38 12:36-48", False),
        ],
    )
    doc.add(f"webpack 5.91.0 compiled with 1 error in {rng.randint(8000, 90000)} ms", mark=True)
    return doc.sample("webpack", "bash", {"command": "npm run build"}, share)


def tsc(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)

    def listed(d: Doc) -> None:
        if rng.random() < 0.9:
            d.add(f"/app/{path(rng, rng.choice(('ts', 'tsx', 'd.ts')), depth=3)}")
        else:
            d.add(f"TSFILE: /app/dist/{path(rng, 'js', root='lib')}")

    doc.add("$ tsc --noEmit --listFiles -p tsconfig.json")
    doc.fill(target, listed)
    src = path(rng, "ts")
    line = rng.randint(5, 300)
    doc.insert_at(
        share,
        [
            (
                f"{src}({line},{rng.randint(3, 40)}): error TS2345: Argument of type 'string | "
                "undefined' is not assignable to parameter of type 'string'.",
                True,
            ),
            ("  Type 'undefined' is not assignable to type 'string'.", False),
        ],
    )
    doc.add("")
    doc.add("Found 1 error in " + src + f":{line}", mark=True)
    return doc.sample(
        "tsc", "bash", {"command": "npx tsc --noEmit --listFiles -p tsconfig.json"}, share
    )


def eslint(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    rules = (
        "no-unused-vars",
        "prefer-const",
        "max-len",
        "no-console",
        "eqeqeq",
        "react/prop-types",
        "import/order",
        "@typescript-eslint/no-explicit-any",
    )

    def report(d: Doc) -> None:
        d.add("")
        d.add(f"/app/{path(rng, rng.choice(('js', 'ts', 'tsx')), depth=3)}")
        for _ in range(rng.randint(1, 5)):
            d.add(
                f"  {rng.randint(1, 400)}:{rng.randint(1, 80)}  warning  "
                f"'{ident(rng)}' {rng.choice(('is defined but never used', 'should be const', 'exceeds the maximum line length of 100'))}  "
                f"{rng.choice(rules)}"
            )

    doc.fill(target, report)
    src = path(rng, "ts", depth=3)
    key = (
        f"  {rng.randint(1, 300)}:{rng.randint(1, 60)}  error  '{ident(rng)}' is not defined  "
        "no-undef"
    )
    doc.insert_at(share, [("", False), (f"/app/{src}", True), (key, True)])
    doc.add("")
    doc.add(
        f"✖ {len(doc.lines) // 3} problems (1 error, {len(doc.lines) // 3 - 1} warnings)", mark=True
    )
    return doc.sample("eslint", "bash", {"command": "npx eslint ."}, share)


def docker_build(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    doc.add('#0 building with "default" instance using docker driver')
    step = [1]

    def layer(d: Doc) -> None:
        n = step[0]
        step[0] += 1
        r = rng.random()
        if r < 0.5:
            d.add(
                f"#{n} [build {rng.randint(2, 9)}/12] RUN apt-get install -y "
                f"{ident(rng, 1)}-{ident(rng, 1)}"
            )
            for _ in range(rng.randint(2, 6)):
                d.add(
                    f"#{n} {rng.uniform(0.1, 90):.3f} Get:{rng.randint(1, 300)} "
                    f"http://deb.debian.org/debian bookworm/main amd64 lib{ident(rng, 1)} "
                    f"amd64 {rng.randint(1, 9)}.{rng.randint(0, 20)} [{rng.randint(10, 900)} kB]"
                )
        elif r < 0.8:
            d.add(
                f"#{n} sha256:{rng.randbytes(32).hex()} {rng.randint(1, 90)}.{rng.randint(0, 9)}MB"
                f" / {rng.randint(90, 200)}.0MB {rng.uniform(0.5, 20):.1f}s"
            )
        else:
            d.add(
                f"#{n} {rng.uniform(0.1, 300):.3f} Setting up lib{ident(rng, 1)}-dev "
                f"({rng.randint(1, 9)}.{rng.randint(0, 40)}-1) ..."
            )

    doc.fill(target, layer)
    n = step[0]
    doc.insert_at(
        share,
        [
            (f"#{n} [build 7/12] RUN pip install --no-cache-dir -r requirements.txt", False),
            (
                f"#{n} 41.27 ERROR: Could not find a version that satisfies the requirement "
                f"{ident(rng, 2, '-')}==4.2.1 (from versions: 3.0.0, 3.1.0)",
                True,
            ),
            (
                f'#{n} ERROR: process "/bin/sh -c pip install --no-cache-dir -r requirements.txt" did '
                "not complete successfully: exit code: 1",
                True,
            ),
        ],
    )
    doc.add(
        'ERROR: failed to solve: process "/bin/sh -c pip install --no-cache-dir -r '
        'requirements.txt" did not complete successfully: exit code: 1',
        mark=True,
    )
    return doc.sample("docker-build", "bash", {"command": "docker build -t app:dev ."}, share)


def pip_install(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)

    def dist(d: Doc) -> None:
        name = ident(rng, rng.randint(1, 2), "-")
        version = f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
        r = rng.random()
        if r < 0.4:
            d.add(
                f"Collecting {name}>={version} (from -r requirements.txt (line {rng.randint(1, 90)}))"
            )
        elif r < 0.7:
            d.add(
                f"  Downloading {name.replace('-', '_')}-{version}-py3-none-any.whl "
                f"({rng.randint(10, 999)} kB)"
            )
            d.add(progress_bar(rng, "     ", steps=rng.randint(3, 8), width=40))
        else:
            d.add(
                f"Requirement already satisfied: {name} in ./venv/lib/python3.12/site-packages "
                f"(from {ident(rng, 1)}) ({version})"
            )

    doc.fill(target, dist)
    pkg = ident(rng, 1)
    doc.insert_at(
        share,
        [
            (f"Building wheel for {pkg}-native (pyproject.toml) ... error", True),
            ("  error: subprocess-exited-with-error", True),
            ("  ", False),
            (
                "  × Building wheel for "
                + pkg
                + "-native (pyproject.toml) did not run successfully.",
                False,
            ),
            ("  │ exit code: 1", False),
            (
                f"  ╰─> {pkg}/_native.c:12:10: fatal error: Python.h: No such file or directory",
                True,
            ),
        ],
    )
    doc.add(
        f"ERROR: Failed to build installable wheels for some pyproject.toml based projects "
        f"({pkg}-native)",
        mark=True,
    )
    return doc.sample("pip", "bash", {"command": "pip install -r requirements.txt"}, share)


def mvn(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    doc.add("[INFO] Scanning for projects...")

    def line(d: Doc) -> None:
        r = rng.random()
        group = f"org.{ident(rng, 1)}.{ident(rng, 1)}"
        if r < 0.45:
            d.add(
                f"Downloaded from central: https://repo.maven.apache.org/maven2/"
                f"{group.replace('.', '/')}/{ident(rng, 1)}/{rng.randint(1, 9)}.{rng.randint(0, 20)}"
                f"/{ident(rng, 1)}.jar ({rng.randint(3, 900)} kB at {rng.randint(1, 9)}.{rng.randint(0, 9)} MB/s)"
            )
        elif r < 0.75:
            d.add(
                f"[INFO] --- {rng.choice(('compiler', 'resources', 'surefire', 'jar'))}"
                f":3.{rng.randint(0, 12)}.0:{rng.choice(('compile', 'testCompile', 'test'))} "
                f"(default) @ {ident(rng, 1, '-')}-{ident(rng, 1)} ---"
            )
        elif r < 0.92:
            d.add(
                f"[INFO] Tests run: {rng.randint(1, 60)}, Failures: 0, Errors: 0, Skipped: "
                f"{rng.randint(0, 2)}, Time elapsed: {rng.uniform(0.01, 9):.3f} s -- in "
                f"{group}.{ident(rng, 1).title()}Test"
            )
        else:
            d.add(
                f"[WARNING] {path(rng, 'java', root='src/main/java')}:[{rng.randint(1, 400)},"
                f"{rng.randint(1, 40)}] deprecation: {ident(rng)}() has been deprecated"
            )

    doc.fill(target, line)
    cls = f"com.acme.{ident(rng, 1)}.{ident(rng, 1).title()}ServiceTest"
    doc.insert_at(
        share,
        [
            (
                f"[ERROR] Tests run: 14, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 2.114 s <<< "
                f"FAILURE! -- in {cls}",
                True,
            ),
            (f"[ERROR] {cls}.shouldRejectExpiredToken -- Time elapsed: 0.041 s <<< FAILURE!", True),
            ("org.opentest4j.AssertionFailedError: expected: <401> but was: <200>", True),
            ("\tat org.junit.jupiter.api.AssertionUtils.fail(AssertionUtils.java:151)", False),
        ],
    )
    doc.add("[INFO] BUILD FAILURE")
    doc.add(
        "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-surefire-plugin:3.2.5:"
        "test (default-test) on project api: There are test failures.",
        mark=True,
    )
    return doc.sample("mvn", "bash", {"command": "mvn -B verify"}, share)


def gradle(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    doc.add("Starting a Gradle Daemon (subsequent builds will be faster)")

    def task(d: Doc) -> None:
        module = ident(rng, 1)
        r = rng.random()
        if r < 0.6:
            d.add(
                f"> Task :{module}:{rng.choice(('compileJava', 'compileKotlin', 'processResources', 'classes', 'jar', 'test'))}"
                f"{rng.choice(('', '', ' UP-TO-DATE', ' FROM-CACHE', ' NO-SOURCE'))}"
            )
        elif r < 0.85:
            d.add(
                f"w: file:///app/{module}/{path(rng, 'kt', root='src/main/kotlin')}:{rng.randint(1, 300)}:"
                f"{rng.randint(1, 60)} Parameter '{ident(rng)}' is never used"
            )
        else:
            d.add(progress_bar(rng, "<=============> 80% EXECUTING", steps=4, width=13))

    doc.fill(target, task)
    module = ident(rng, 1)
    src = path(rng, "kt", root="src/main/kotlin")
    doc.insert_at(
        share,
        [
            (f"> Task :{module}:compileKotlin FAILED", True),
            (
                f"e: file:///app/{module}/{src}:{rng.randint(5, 200)}:{rng.randint(5, 40)} Unresolved "
                f"reference: {ident(rng)}",
                True,
            ),
        ],
    )
    doc.add("FAILURE: Build failed with an exception.", mark=True)
    doc.add("* What went wrong:")
    doc.add(f"Execution failed for task ':{module}:compileKotlin'.")
    doc.add("BUILD FAILED in 1m 12s")
    return doc.sample("gradle", "bash", {"command": "./gradlew build"}, share)
