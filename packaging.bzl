"""Rules that package kiln for use outside Bazel: the merged static archive,
the pkg-config file and the CMake package's files. `./kiln.sh install` copies
their outputs into a prefix."""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _static_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)

    # Bazel 4 has no cc_static_library, and a cc_library's own archive holds
    # only its own objects. Taking the objects from the dependencies' link
    # inputs means that a folder //api comes to depend on lands in libkiln.a
    # without editing this rule. System libraries given as linkopts (-lxxhash,
    # -lm) stay outside; kiln.pc names them.
    objects = {}
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            for lib in linker_input.libraries:
                # PIC objects, so that the archive links into the
                # position-independent executables Debian's gcc makes.
                for obj in lib.pic_objects or lib.objects:
                    objects[obj] = None
    if not objects:
        fail("%s: the dependencies have no objects" % ctx.label)

    out = ctx.actions.declare_file(ctx.label.name)
    args = ctx.actions.args()
    args.add(cc_toolchain.ar_executable)
    args.add(out)
    args.add_all(objects.keys())

    # "q" appends without replacing members of the same name, so two folders'
    # util.c both survive; "D" keeps the archive reproducible.
    ctx.actions.run_shell(
        inputs = depset(objects.keys(), transitive = [cc_toolchain.all_files]),
        outputs = [out],
        arguments = [args],
        command = 'ar="$1"; out="$2"; shift 2; rm -f "$out"; "$ar" qcDs "$out" "$@"',
        mnemonic = "StaticLibrary",
        progress_message = "Merging %d objects into %s" % (len(objects), out.short_path),
    )
    return [DefaultInfo(files = depset([out]))]

# One archive holding every object of deps and of the libraries they depend
# on, named after the target as cc_binary names its output:
# static_library(name = "libkiln.a", ...) makes libkiln.a.
static_library = rule(
    implementation = _static_library_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)

def _configured_file_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name)
    prefix = ctx.var.get("prefix", "/usr/local")
    if not prefix.startswith("/"):
        fail("--define=prefix=%s: the prefix must be an absolute path" % prefix)

    # The version is read from the header at build time, so that kiln.h stays
    # the one place that states it.
    ctx.actions.run_shell(
        inputs = [ctx.file.template, ctx.file.header],
        outputs = [out],
        arguments = [ctx.file.template.path, ctx.file.header.path, prefix, out.path],
        command = """
template="$1"; header="$2"; prefix="$3"; out="$4"
part() { sed -n "s/^#define KILN_VERSION_$1 \\([0-9][0-9]*\\).*/\\1/p" "$header"; }
major="$(part MAJOR)"; minor="$(part MINOR)"; patch="$(part PATCH)"
version="$major.$minor.$patch"
case "$version" in *..*|.*|*.) echo "no KILN_VERSION_* in $header" >&2; exit 1;; esac
while IFS= read -r line; do
    line="${line//@PREFIX@/$prefix}"
    line="${line//@VERSION_MAJOR@/$major}"
    line="${line//@VERSION_MINOR@/$minor}"
    printf '%s\\n' "${line//@VERSION@/$version}"
done < "$template" > "$out"
""",
        mnemonic = "ConfigureFile",
        progress_message = "Writing %s for prefix %s" % (out.short_path, prefix),
    )
    return [DefaultInfo(files = depset([out]))]

# A file from a template with @PREFIX@, @VERSION@ (major.minor.patch),
# @VERSION_MAJOR@ and @VERSION_MINOR@, named after the target: the
# pkg-config file and the CMake package's files. The prefix comes from
# --define=prefix=/abs/path (default /usr/local).
configured_file = rule(
    implementation = _configured_file_impl,
    attrs = {
        "template": attr.label(allow_single_file = True, mandatory = True),
        "header": attr.label(allow_single_file = True, mandatory = True),
    },
)
