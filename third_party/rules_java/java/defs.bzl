"""Offline stand-in for rules_java: Bazel's own tools load these even for a C project."""
java_import = native.java_import
java_runtime = native.java_runtime
java_toolchain = native.java_toolchain
java_library = native.java_library
java_binary = native.java_binary
